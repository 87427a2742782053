"""The settings' docs are the code's: every key is in the configuration reference
(docs/reference/configuration.md) with the code's default, and the example configuration
(ops/router.example.toml) shows every key and sets none to anything but its default,
except where it says why. Pure: reads files."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass

from pydantic import BaseModel

from router.config import (
    KafkaSettings,
    MetricsSettings,
    PrioritySettings,
    RedisSettings,
    RegistrySettings,
    RoutingSettings,
    SweeperSettings,
    TopologySettings,
    TracingSettings,
    UnitSettings,
)
from tests.fixtures.mdtables import cells
from tests.fixtures.paths import ROOT


def text(name: str) -> str:
    return (ROOT / name).read_text()


# The settings' sections (`RouterSettings`' fields) and their models.
SECTIONS: dict[str, type[BaseModel]] = {
    "kafka": KafkaSettings,
    "redis": RedisSettings,
    "topology": TopologySettings,
    "routing": RoutingSettings,
    "unit": UnitSettings,
    "sweeper": SweeperSettings,
    "metrics": MetricsSettings,
    "priority": PrioritySettings,
    "tracing": TracingSettings,
    "registry": RegistrySettings,
}


def test_every_setting_is_documented_in_configuration() -> None:
    docs = text("docs/reference/configuration.md")
    missing = [
        f"{section}.{key}"
        for section, model in SECTIONS.items()
        for key in model.model_fields
        if f"`{key}`" not in docs
    ]
    assert not missing, f"settings not in docs/reference/configuration.md: {missing}"


# ------------------------------------------ the defaults docs/reference/configuration.md gives

# Rows of the table whose defaults are not compared, by their section and first key, each
# with why. A row that cannot be read and is not listed here fails the test, and so does an
# entry here whose row is gone or has become readable.
UNREAD_DEFAULTS: dict[str, str] = {}


@dataclass(frozen=True)
class Row:
    """A row of the `| section | key | default | meaning |` table, its cells as written."""

    section: str
    keys: str
    defaults: str

    @property
    def name(self) -> str:
        """`section.first_key`: how UNREAD_DEFAULTS and the messages name the row."""
        first = re.search(r"`([^`]+)`", self.keys)
        return f"{self.section}.{first[1] if first else self.keys}"


@dataclass(frozen=True)
class Template:
    """A default derived from other settings, e.g. `<name>.dlq`: the code's field is empty
    and a default-built model fills it in so."""

    text: str


DERIVED = Template("derived")  # a default computed from other settings, not said how


def table_rows(markdown: str) -> list[Row]:
    """The rows of the configuration table (the lines after its header, up to the first line
    that is not a table row)."""
    lines = markdown.splitlines()
    head = re.compile(r"\|\s*section\s*\|\s*key\s*\|\s*default\s*\|\s*meaning\s*\|")
    header = [i for i, line in enumerate(lines) if head.fullmatch(line.strip())]
    assert len(header) == 1, "no single `| section | key | default | meaning |` table"
    rows: list[Row] = []
    for line in lines[header[0] + 1 :]:
        if not line.startswith("|"):
            break
        row = cells(line)
        if len(row) < 4 or set(line) <= set("|-: "):
            continue  # the separator line
        rows.append(Row(row[0], row[1], row[2]))
    return rows


def cell_items(cell: str) -> list[str]:
    """A key or default cell -> its items: parenthesised remarks dropped, cut at the commas
    and slashes outside code spans (`a` / `b`, `c` -> three items). ValueError: unbalanced."""
    tokens = re.findall(r"`[^`]*`|[(),/]|[^`(),/]+", cell)
    if "".join(tokens) != cell:
        raise ValueError("an unclosed code span")
    items, current, depth = [], "", 0
    for token in tokens:
        if token in "()":
            depth += 1 if token == "(" else -1
            if depth < 0:
                raise ValueError("a ')' without its '('")
        elif depth:
            continue
        elif token in ",/":
            items.append(current.strip())
            current = ""
        else:
            current += token
    if depth:
        raise ValueError("a '(' without its ')'")
    return [*items, current.strip()]


# A duration in words, in the unit of the key's suffix (`max_ttl_ms`: 7 days = 604800000).
DURATION_MS = {"day": 86_400_000, "hour": 3_600_000, "minute": 60_000, "second": 1_000}


def documented_value(item: str, key: str) -> object:
    """One default as the table writes it -> the value it stands for: `—` or unset: None;
    derived: DERIVED; a duration in words; or a code span: true/false, an integer (with or
    without thousands separators), a decimal, [] {} "", a `<field>` template, else the
    string as written. ValueError: none of these."""
    if item in ("—", "unset"):
        return None
    if item == "derived":
        return DERIVED
    words = re.fullmatch(r"(\d+) (day|hour|minute|second)s?", item)
    if words:
        per = {"_ms": 1, "_s": 1_000}.get(key[key.rfind("_") :])
        if per is None:
            raise ValueError(f"{item!r} for a key that ends in neither _ms nor _s")
        return int(words[1]) * DURATION_MS[words[2]] // per
    span = re.fullmatch(r"`([^`]*)`", item)
    if span is None:
        raise ValueError(f"{item!r}: neither a code span nor —, unset, derived or a duration")
    value = span[1]
    literals: dict[str, object] = {
        "—": None,
        "true": True,
        "false": False,
        "[]": [],
        "{}": {},
        '""': "",
    }
    if value in literals:
        return literals[value]
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+|-?\d+", value):
        return int(value.replace(",", ""))
    if re.fullmatch(r"-?\d+\.\d+", value):
        return float(value)
    if re.search(r"<[a-z_]+>", value):
        return Template(value)
    return value


def same(documented: object, code: object) -> bool:
    """The documented default is the code's: numbers by value (`90` for 90.0), a tuple as
    a list (TOML and JSON have arrays), a bool only as a bool, anything else of one type."""
    code = list(code) if isinstance(code, tuple) else code
    numbers = (int, float)
    flags = isinstance(documented, bool) or isinstance(code, bool)
    if not flags and isinstance(documented, numbers) and isinstance(code, numbers):
        return documented == code
    return type(documented) is type(code) and documented == code


def default_problem(model: type[BaseModel], key: str, documented: object, item: str) -> str | None:
    """Why `item` (read as `documented`) is not the default of `model`'s field `key`."""
    code = model.model_fields[key].get_default(call_default_factory=True)
    if isinstance(documented, Template):
        if code not in (None, "", [], {}, ()):
            return f"says {item!r} (derived), but the code's default is {code!r}"
        if documented is DERIVED:
            return None
        built = model()
        names = re.findall(r"<([a-z_]+)>", documented.text)
        if any(n not in model.model_fields for n in names):
            return f"says {item!r}: a template naming a setting {model.__name__} does not have"
        expected = re.sub(r"<([a-z_]+)>", lambda m: str(getattr(built, m[1])), documented.text)
        actual = getattr(built, key)
        return None if actual == expected else f"says {item!r}, but a default is {actual!r}"
    if same(documented, code):
        return None
    return f"says {item!r}, but the code's default is {code!r}"


def configuration_default_problems(
    markdown: str,
    sections: dict[str, type[BaseModel]] = SECTIONS,
    unread: dict[str, str] = UNREAD_DEFAULTS,
) -> list[str]:
    """Every row of the configuration table whose defaults differ from the code's, cannot be
    read (and is not in `unread`), or names a key its section does not have; and every entry
    of `unread` that no unreadable row needs."""
    problems: list[str] = []
    needed: set[str] = set()
    for row in table_rows(markdown):
        model = sections.get(row.section)
        if model is None:
            problems.append(f"{row.name}: no settings section {row.section!r}")
            continue
        try:
            items = cell_items(row.keys)
            keys = [re.fullmatch(r"`([a-z][a-z0-9_]*)`", k) for k in items]
            if not all(keys):
                raise ValueError(f"keys {items} are not all a code span each")
            names = [k[1] for k in keys if k]
            unknown = [k for k in names if k not in model.model_fields]
            if unknown:
                problems.append(f"{row.name}: {unknown} not settings of [{row.section}]")
                continue
            defaults = cell_items(row.defaults)
            if len(defaults) != len(names):
                raise ValueError(f"{len(names)} keys but {len(defaults)} defaults")
            values = [documented_value(d, k) for d, k in zip(defaults, names, strict=True)]
        except ValueError as exc:
            if row.name in unread:
                needed.add(row.name)
            else:
                why = f"cannot read the row ({exc}): fix it, or list it in UNREAD_DEFAULTS with why"
                problems.append(f"{row.name}: {why}")
            continue
        for key, value, item in zip(names, values, defaults, strict=True):
            problem = default_problem(model, key, value, item)
            if problem:
                problems.append(f"{row.section}.{key}: the table {problem}")
    problems += [
        f"{n}: in UNREAD_DEFAULTS, but no unreadable row" for n in unread if n not in needed
    ]
    return problems


def test_configuration_defaults_are_the_codes() -> None:
    docs = text("docs/reference/configuration.md")
    assert len(table_rows(docs)) >= 40, "the configuration table lost its rows?"
    problems = configuration_default_problems(docs)
    assert not problems, "docs/reference/configuration.md:\n" + "\n".join(problems)


def test_a_wrong_or_unreadable_default_in_configuration_is_caught() -> None:
    table = (
        "| section | key | default | meaning |\n|---|---|---|---|\n"
        "| kafka | `linger_ms`, `compression_type` | `5`, `gzip` | |\n"
        "| unit | `batch_size` (a remark, `500`) / `max_batch_bytes` "
        "| `1,000` / `8388608` (8 MiB) | |\n"
        "| routing | `max_ttl_ms`, `ttl_by_type` | 6 days, `{}` | |\n"
        "| redis | `sentinels`, `sentinel_service` | `[]`, `mymaster` | |\n"
        "| topology | `receive_queues` / `dead_letter_topic` | derived / `<name>.dead` | |\n"
        "| metrics | `port`, `host` | `0` | |\n"
        "| tracing | `enabled` | `true` | |\n"
        "| registry | `no_such_key` | — | |\n"
        "| sweeper | `batch` | a thousand | |\n"
        "\nafter the table: | not | a | row |\n"
    )
    unread = {"tracing.enabled": "stale: readable", "unit.no_such_row": "stale: gone"}
    assert configuration_default_problems(table, SECTIONS, unread) == [
        "kafka.compression_type: the table says '`gzip`', but the code's default is 'lz4'",
        "unit.batch_size: the table says '`1,000`', but the code's default is 500",
        "routing.max_ttl_ms: the table says '6 days', but the code's default is 604800000",
        "redis.sentinel_service: the table says '`mymaster`', but the code's default is None",
        "topology.dead_letter_topic: the table says '`<name>.dead`', but a default is 'router.dlq'",
        "metrics.port: cannot read the row (2 keys but 1 defaults): fix it, or list it in "
        "UNREAD_DEFAULTS with why",
        "tracing.enabled: the table says '`true`', but the code's default is False",
        "registry.no_such_key: ['no_such_key'] not settings of [registry]",
        "sweeper.batch: cannot read the row ('a thousand': neither a code span nor —, unset, "
        "derived or a duration): fix it, or list it in UNREAD_DEFAULTS with why",
        "tracing.enabled: in UNREAD_DEFAULTS, but no unreadable row",
        "unit.no_such_row: in UNREAD_DEFAULTS, but no unreadable row",
    ]


# ------------------------------------------------------ the values ops/router.example.toml sets

# Keys the example sets to something other than the code's default on purpose (it shows
# them), each with why; every other key it sets (not commented out) is the code's default.
EXAMPLE_CHOICES: dict[str, str] = {
    "topology.name": "the example's topics are named shop.*",
    "routing.ttl_by_type": "shows TTLs by message type",
}


def example_problems(
    toml_text: str,
    sections: dict[str, type[BaseModel]] = SECTIONS,
    choices: dict[str, str] = EXAMPLE_CHOICES,
) -> list[str]:
    """Every key the example sets that is not a setting, or whose value is not the code's
    default and not in `choices`; and every entry of `choices` the example does not set
    to something else."""
    problems: list[str] = []
    chosen: set[str] = set()
    for section, table in tomllib.loads(toml_text).items():
        model = sections.get(section)
        if model is None or not isinstance(table, dict):
            problems.append(f"[{section}] is not a settings section")
            continue
        for key, value in table.items():
            name = f"{section}.{key}"
            if key not in model.model_fields:
                problems.append(f"{name} is not a setting")
                continue
            code = model.model_fields[key].get_default(call_default_factory=True)
            if same(value, code):
                continue
            if name in choices:
                chosen.add(name)
            else:
                problems.append(f"{name} = {value!r}, but the code's default is {code!r}")
    problems += [
        f"{n}: in EXAMPLE_CHOICES, but set to the default or not at all"
        for n in choices
        if n not in chosen
    ]
    return problems


def test_the_example_configuration_sets_the_codes_defaults() -> None:
    problems = example_problems(text("ops/router.example.toml"))
    assert not problems, "ops/router.example.toml:\n" + "\n".join(problems)


def test_a_wrong_default_in_the_example_configuration_is_caught() -> None:
    example = '[unit]\nbatch_size = 400\nbackoff_max_ms = 5000\n[routing]\nbusy_policy = "wait"\n'
    assert example_problems(example, SECTIONS, {"routing.busy_policy": "shows one"}) == [
        "unit.batch_size = 400, but the code's default is 500",
        "routing.busy_policy: in EXAMPLE_CHOICES, but set to the default or not at all",
    ]


# ------------------------------------------------ the keys ops/router.example.toml shows

# A table header, `[section]` or `[section.key]`, or one commented out (`# [section.key]`).
EXAMPLE_HEADER = re.compile(r"#?\s*\[\s*([A-Za-z0-9_.-]+)\s*\]\s*(?:#.*)?")
# A key set (`key = ...`) or commented out (`# key = ...`); quoted keys are a table's entries.
EXAMPLE_KEY = re.compile(r"(#\s*)?([A-Za-z0-9_-]+)\s*=")


def example_key_problems(
    toml_text: str, sections: dict[str, type[BaseModel]] = SECTIONS
) -> list[str]:
    """Every setting of `sections` the example neither sets nor shows commented out (a
    `key = ` or `# key = ` line in its section's table, or a `[section.key]` sub-table);
    then every key commented out in a section's table that is not one of its settings.
    A line belongs to the table whose header (commented out or not) precedes it, as it
    would once uncommented: a key after `# [redis.address_map]` is that table's entry,
    not redis's. Read line by line: commented-out lines are not TOML."""
    shown: set[str] = set()
    problems: list[str] = []
    table: list[str] = []  # the current table's dotted name; [] before the first header
    for line in toml_text.splitlines():
        header = EXAMPLE_HEADER.fullmatch(line.strip())
        if header:
            table = header[1].split(".")
            if len(table) == 2:
                shown.add(header[1])
            continue
        key = EXAMPLE_KEY.match(line.strip())
        if key is None or len(table) != 1 or table[0] not in sections:
            continue
        name = f"{table[0]}.{key[2]}"
        shown.add(name)
        if key[1] and key[2] not in sections[table[0]].model_fields:
            problems.append(f"{name} is commented out but is not a setting")
    missing = [
        f"{section}.{key} is neither set nor commented out"
        for section, model in sections.items()
        for key in model.model_fields
        if f"{section}.{key}" not in shown
    ]
    return missing + problems


def test_the_example_configuration_shows_every_setting() -> None:
    problems = example_key_problems(text("ops/router.example.toml"))
    assert not problems, "ops/router.example.toml:\n" + "\n".join(problems)


def test_a_setting_missing_from_the_example_configuration_is_caught() -> None:
    example = (
        "# batch = 1000\n"  # before any table: no section's
        "[sweeper]\n"
        "interval_ms = 1000\n"
        "#closing_grace_ms = 5000   # commented out: shown\n"
        "writer_idle_s = 86400\n"
        "[metrics]\n"
        "# batch = 1000\n"  # a sweeper key under [metrics]
        "port = 0\n"
        "# [metrics.labels]\n"
        '# host = "127.0.0.1"\n'  # the commented-out sub-table's entry, not metrics'
        "[priority.bands]\n"  # a sub-table shows its key
    )
    sections: dict[str, type[BaseModel]] = {
        "sweeper": SweeperSettings,
        "metrics": MetricsSettings,
        "priority": PrioritySettings,
    }
    assert example_key_problems(example, sections) == [
        "sweeper.batch is neither set nor commented out",
        "metrics.host is neither set nor commented out",
        "metrics.liveness_timeout_s is neither set nor commented out",
        "priority.min_share is neither set nor commented out",
        "metrics.batch is commented out but is not a setting",
    ]
