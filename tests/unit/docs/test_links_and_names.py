"""README.md, CHANGELOG.md, docs/ and spark_jobs/README.md name only what exists. Pure: reads
files, and the click CLI, the Spark jobs' argparse parsers and the settings models; no servers.

What counts, precisely (code blocks are fenced blocks; "shell" blocks are those tagged
sh, bash, shell, console or untagged):

1. Links: every relative markdown link and image outside code (inline `[t](path#anchor)`
   and reference definitions `[r]: path`) resolves to a file or folder of the repository,
   and an `#anchor` on a markdown target (or on the page itself) is the GitHub slug of one
   of its headings.
2. `make <target> ...` in code spans and shell blocks: every target is a Makefile target.
3. `router <command> [<subcommand>]` in code spans and shell blocks (also `.venv/bin/router`,
   `python -m router` and `$(router ...)`; a line ending in `\\` goes on, a shell operator or
   the `)` of `$(` ends it), options skipped with their values: the command path exists in
   the click CLI. `from router import ...` is Python, not a command. Every option there
   (`[--wait]` too) is taken by the command at its place: the root before the command, the
   command after it (click's, `-h` too; `router spark sender|receiver`: the job's argparse
   parser's); after `a|b` by one of them, after `<command>` or `...` by one below.
4. Settings: a code span that starts with `<section>.<key>` (exactly two components, the
   section a field of `RouterSettings`, the key a lowercase identifier, not followed by
   another `.`: so `kafka.linger.ms`, a Spark connector option, and `metrics.md`, a file,
   are not settings); any `ROUTER_<SECTION>__<KEY>` variable anywhere; and every key of a
   TOML block's settings section. Each must be a field of that section's model.
5. Repository paths in code spans and shell blocks (`router/...`, `ops/...`, `tests/...`,
   `spark_jobs/...`, `schemas/...`, `docs/...` ending in an extension or `/`; globs allowed) exist,
   and dotted Python names in code spans (`router.table.steer`, `ops.harness.verdict.verify.Sent`)
   and `from ... import` lines of Python blocks name a module and a top-level name in it.
   Avro full names (`router.events.DeadLetter`: the namespaces of `schemas/`) are not Python.
6. Code blocks are correct as far as a parser can tell: Python parses, TOML parses, JSON
   parses (whole, or line by line for JSON lines).
7. docs/index.md links every page under docs/; docs/reference/cli.md names every command of
   the CLI (its options column: test_cli_reference.py) and docs/reference/make.md every
   documented Makefile target.
8. docs/reference/clients.md lists every keyword argument of `Sender`, `Sender.send` and
   `Receiver`, and no argument they do not take.

Each check has a negative test below: a made-up bad name or link is caught.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import shlex
import tomllib
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import click
import pytest
from pydantic import BaseModel

from router.cli import cli
from router.config import RouterSettings
from router.receiver import Receiver
from router.sender import Sender
from tests.fixtures.cli_names import cli_options

ROOT = Path(__file__).resolve().parents[3]
SHELL = {"", "sh", "bash", "shell", "console"}
PATH_ROOTS = ("router", "ops", "tests", "spark_jobs", "schemas", "docs")
PY_ROOTS = ("router", "ops", "spark_jobs")


def doc_files() -> list[Path]:
    return [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        ROOT / "spark_jobs" / "README.md",
    ]


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Page:
    """A markdown page taken apart: its fenced blocks, its code spans and the rest."""

    path: Path
    blocks: tuple[tuple[str, str], ...]  # (language, body)
    spans: tuple[str, ...]
    prose: str  # outside blocks, code spans replaced by a placeholder
    headings: tuple[str, ...]  # ATX headings outside blocks, as written

    @property
    def name(self) -> str:
        return str(self.path.relative_to(ROOT))


FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")


def parse(path: Path, text: str) -> Page:
    blocks: list[tuple[str, str]] = []
    outside: list[str] = []
    fence: str | None = None
    lang, body = "", list[str]()
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence, lang, body = m.group(1), m.group(2).lower(), []
            outside.append("")
        elif fence is not None and line.strip().startswith(fence[0] * len(fence)):
            blocks.append((lang, "\n".join(body)))
            fence = None
            outside.append("")
        elif fence is not None:
            body.append(line)
        else:
            outside.append(line)
    rest = "\n".join(outside)
    spans = tuple(" ".join(m.group(2).replace("\\|", "|").split()) for m in SPAN.finditer(rest))
    prose = SPAN.sub(lambda m: "`code`", rest)
    headings = tuple(
        h.group(2) for line in rest.splitlines() if (h := HEADING.match(line)) is not None
    )
    return Page(path, tuple(blocks), spans, prose, headings)


@cache
def page(path: Path) -> Page:
    return parse(path, path.read_text())


def shell_lines(p: Page) -> list[str]:
    """Shell blocks' lines without comments, a line ending in `\\` joined to the next, and
    every code span: where commands are."""
    lines = [
        re.sub(r"(^|\s)#.*$", "", line)
        for lang, body in p.blocks
        if lang in SHELL
        for line in re.sub(r"\\\n", " ", body).splitlines()
    ]
    return [*lines, *p.spans]


# --------------------------------------------------------------------------- 1. links


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text, lowercased, punctuation other
    than '-' and '_' removed, spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links, images: their text
    pieces = re.split(r"(`[^`]*`)", text)  # HTML tags and emphasis count outside code only
    text = "".join(
        piece.strip("`") if piece.startswith("`") else re.sub(r"<[^>]*>|\*", "", piece)
        for piece in pieces
    )
    kept = (
        c
        for c in text.lower()
        if c in " -_" or unicodedata.category(c)[0] in "LMN" or unicodedata.category(c) == "Pc"
    )
    return "".join(kept).replace(" ", "-")


def anchors(p: Page) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in p.headings:
        base = slug(heading)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    out |= set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", p.prose))
    return out


INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)


def links(p: Page) -> list[str]:
    return [*INLINE_LINK.findall(p.prose), *REF_DEF.findall(p.prose)]


def link_problems(p: Page) -> list[str]:
    problems = []
    for target in links(p):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:
            continue
        where, _, anchor = target.partition("#")
        base = ROOT if where.startswith("/") else p.path.parent
        dest = (base / unquote(where).lstrip("/")).resolve() if where else p.path
        if where and (not dest.is_relative_to(ROOT) or not dest.exists()):
            problems.append(f"{p.name}: link to a missing file: {target}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(page_of(dest, p)):
            problems.append(f"{p.name}: no heading for the anchor: {target}")
    return problems


def page_of(path: Path, current: Page) -> Page:
    return current if path == current.path else page(path.resolve())


# --------------------------------------------------------------------------- 2. make


@cache
def make_targets() -> frozenset[str]:
    targets: set[str] = set()
    for line in (ROOT / "Makefile").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][\w.-]*(?:\s+[A-Za-z0-9][\w.-]*)*)\s*:(?![:=])", line)
        if m:
            targets.update(m.group(1).split())
    return frozenset(targets)


def make_calls(p: Page) -> list[list[str]]:
    calls = []
    for line in shell_lines(p):
        for m in re.finditer(r"(?:^|(?<=[\s(`]))make\s+([^;&|)`]*)", line):
            try:
                words = shlex.split(m.group(1))
            except ValueError:
                words = m.group(1).split()
            calls.append([w for w in words if "=" not in w and not w.startswith("-")])
    return calls


def make_problems(p: Page, targets: frozenset[str]) -> list[str]:
    return [
        f"{p.name}: `make {target}` is not a Makefile target"
        for call in make_calls(p)
        for target in call
        if target not in targets
    ]


# --------------------------------------------------------------------------- 3. CLI


def router_calls(p: Page) -> list[list[str]]:
    calls = []
    for line in shell_lines(p):
        words = line.split()
        for i, word in enumerate(words):
            bare = word.lstrip("$(`\"'")
            if (bare == "router" or bare.endswith("/bin/router")) and (
                i == 0 or words[i - 1] not in ("from", "import")
            ):
                calls.append(command_words(words[i + 1 :]))
    return calls


SHELL_END = re.compile(r"\|\|?|&&?|;|<|\d*>.*")  # operators and redirections


def command_words(words: list[str]) -> list[str]:
    """The words up to the end of the command: a shell operator, a redirection, or the `)`
    or backtick closing the `$(...)` it is in."""
    out = []
    for word in words:
        if SHELL_END.fullmatch(word):
            break
        out.append(word.rstrip(")`\"';"))
        if word.rstrip("\"'").endswith((")", "`", ";")):
            break
    return out


def cli_problem(words: list[str], root: click.Command = cli) -> str | None:
    """Why `router <words>` is not a command of the CLI, or None if it is."""
    command, path, skip = root, ["router"], False
    for word in words:
        if skip:
            skip = False
            continue
        if word.startswith("-"):
            option = next((o for o in command.params if word.split("=")[0] in o.opts), None)
            skip = isinstance(option, click.Option) and not option.is_flag and "=" not in word
            continue
        if not isinstance(command, click.Group) or not re.fullmatch(r"[a-z][a-z0-9|-]*", word):
            return None  # an argument, a placeholder (<gid>, [...]) or shell syntax
        group = command
        names = word.split("|")
        missing = [n for n in names if n not in group.commands]
        if missing:
            return f"`{' '.join(path)} {word}`: no command {missing} in `{' '.join(path)}`"
        command, path = group.commands[names[0]], [*path, names[0]]
    return None


def cli_problems(p: Page) -> list[str]:
    return [f"{p.name}: {why}" for words in router_calls(p) if (why := cli_problem(words))]


def cli_paths(command: click.Command = cli, path: str = "router") -> list[str]:
    out = [path]
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            out += cli_paths(sub, f"{path} {name}")
    return out


def router_options(words: list[str]) -> list[tuple[str, str, tuple[str, ...]]]:
    """The options in `router <words>`, each as (the command as written, the option, the
    command paths it goes to): one, each of `a|b`, or after a placeholder (`<command>`,
    `...`) the group's and every one below it. `[--wait]` is `--wait`; values are skipped."""
    options = cli_options()
    written, value = "router", False
    paths: tuple[str, ...] = ("router",)
    found: list[tuple[str, str, tuple[str, ...]]] = []
    for word in (w.strip("[]") for w in words):
        if value:
            value = False
        elif word == "--":
            break
        elif re.match(r"-[-a-zA-Z]", word):
            names = word.split("=")[0].split("|")
            found += [(written, name, paths) for name in names]
            value = "=" not in word and any(options[q].get(names[-1]) for q in paths)
        elif len(paths) == 1 and any(q.startswith(f"{paths[0]} ") for q in options):
            if not re.fullmatch(r"[a-z][a-z0-9|-]*", word):
                paths = tuple(q for q in options if f"{q} ".startswith(f"{paths[0]} "))
            elif all(f"{paths[0]} {n}" in options for n in word.split("|")):
                paths = tuple(f"{paths[0]} {n}" for n in word.split("|"))
            else:
                break  # no such command: cli_problems reports it
            written = f"{written} {word}"
    return found


def option_problems(p: Page) -> list[str]:
    """Options that no command they go to takes; a parent's is pointed to: click takes it only
    before the subcommand."""
    options = cli_options()
    problems = []
    for words in router_calls(p):
        for written, name, paths in router_options(words):
            if not any(name in options[q] for q in paths):
                up = [
                    q for q in options if f"{paths[0]} ".startswith(f"{q} ") and name in options[q]
                ]
                hint = f" (an option of `{up[0]}`: it goes right after `{up[0]}`)" if up else ""
                problems.append(
                    f"{p.name}: `{written} {name}`: no option {name} in `{written}`{hint}"
                )
    return problems


# --------------------------------------------------------------------------- 4. settings


def sections() -> dict[str, type[BaseModel]]:
    return {
        name: field.annotation
        for name, field in RouterSettings.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    }


FILE_SUFFIX = re.compile(r"\.(md|py|lua|toml|json|ya?ml|avsc|png|html|sh|txt|jar)$")


def named_settings(p: Page) -> list[str]:
    """`section.key` names: dotted code spans, environment variables, TOML blocks."""
    known = sections()
    names = []
    for span in p.spans:
        m = re.match(r"([a-z]+)\.([a-z][a-z0-9_]*)(?![\w.])", span)
        if m and m.group(1) in known and not FILE_SUFFIX.search(m.group(0)):
            names.append(f"{m.group(1)}.{m.group(2)}")
    everything = "\n".join([p.prose, *p.spans, *(body for _, body in p.blocks)])
    for section, key in re.findall(r"\bROUTER_([A-Z]+)__([A-Z0-9]+(?:_[A-Z0-9]+)*)", everything):
        names.append(f"{section.lower()}.{key.lower()}")
    for lang, body in p.blocks:
        if lang == "toml":
            try:
                data = tomllib.loads(body)
            except tomllib.TOMLDecodeError:
                continue  # reported by the code block check
            for section, table in data.items():
                if section in known and isinstance(table, dict):
                    names += [f"{section}.{key}" for key in table]
    return names


def setting_problems(p: Page) -> list[str]:
    known = sections()
    problems = []
    for name in named_settings(p):
        section, key = name.split(".")
        if section not in known:
            problems.append(f"{p.name}: `{name}`: no settings section {section!r}")
        elif key not in known[section].model_fields:
            problems.append(f"{p.name}: `{name}` is not a setting of [{section}]")
    return problems


# --------------------------------------------------------------------------- 5. paths, names


def repo_paths(p: Page) -> list[str]:
    roots = "|".join(PATH_ROOTS)
    pattern = re.compile(rf"(?<![\w./:-])((?:{roots})/[\w./*-]*(?:\.\w+|/))")
    found = []
    for text in [*p.spans, *(body for lang, body in p.blocks if lang in SHELL)]:
        found += pattern.findall(text)
    return found


@cache
def avro_namespaces() -> frozenset[str]:
    return frozenset(
        json.loads(f.read_text()).get("namespace", "") for f in (ROOT / "schemas").rglob("*.avsc")
    )


def module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def top_level_names(path: Path) -> frozenset[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def python_name_problem(dotted: str) -> str | None:
    """Why `dotted` (a module, or a module and a name in it) does not exist, or None. The
    source is read, not imported, except for the `router` package itself, whose modules may
    also offer a name lazily (`from router import multicast`)."""
    parts = dotted.split(".")
    if any(dotted == ns or dotted.startswith(ns + ".") for ns in avro_namespaces()):
        return None
    if parts[0] == "router" and imported_name_exists(parts):
        return None
    for cut in range(len(parts), 0, -1):
        module = module_file(parts[:cut])
        if module is None:
            continue
        if cut == len(parts):
            return None
        name = parts[cut]
        if name in top_level_names(module) or module_file([*parts[:cut], name]):
            return None
        return f"`{dotted}`: no {name!r} in {module.relative_to(ROOT)}"
    return f"`{dotted}`: no such module"


def imported_name_exists(parts: list[str]) -> bool:
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return cut == len(parts) or hasattr(module, parts[cut])
    return False


def python_names(p: Page) -> list[str]:
    roots = "|".join(PY_ROOTS)
    pattern = re.compile(rf"(?<![\w./-])((?:{roots})(?:\.[A-Za-z_]\w*)+)")
    names = [n for span in p.spans for n in pattern.findall(span) if not FILE_SUFFIX.search(n)]
    for lang, body in p.blocks:
        if lang == "python":
            try:
                tree = ast.parse(body)
            except SyntaxError:
                continue  # reported by the code block check
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                    PY_ROOTS
                ):
                    names += [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    names += [a.name for a in node.names if a.name.split(".")[0] in PY_ROOTS]
    return names


def name_problems(p: Page) -> list[str]:
    problems = []
    for path in repo_paths(p):
        if not any(ROOT.glob(path.rstrip("/"))) if "*" in path else not (ROOT / path).exists():
            problems.append(f"{p.name}: `{path}` does not exist")
    for name in python_names(p):
        if why := python_name_problem(name):
            problems.append(f"{p.name}: {why}")
    return problems


# --------------------------------------------------------------------------- 6. code blocks


def code_block_problems(p: Page) -> list[str]:
    problems = []
    for lang, body in p.blocks:
        try:
            if lang == "python":
                ast.parse(body)
            elif lang == "toml":
                tomllib.loads(body)
            elif lang == "json":
                try:
                    json.loads(body)
                except ValueError:
                    for line in filter(str.strip, body.splitlines()):
                        json.loads(line)
        except (SyntaxError, ValueError) as e:
            problems.append(f"{p.name}: a {lang} block does not parse: {e}")
    return problems


# --------------------------------------------------------------------------- 7. the maps


def unlinked_pages(index: Page, pages: list[Path]) -> list[str]:
    linked = {
        (index.path.parent / unquote(t.partition("#")[0])).resolve()
        for t in links(index)
        if t and not t.startswith("#")
    }
    return [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in linked | {index.path}]


def signature_problems(cell: str, function: Callable[..., object]) -> list[str]:
    """The arguments a table cell names (lowercase code spans) against `function`'s: every
    keyword-only one named, nothing named that it does not take."""
    params = inspect.signature(function).parameters
    named = {n for n in re.findall(r"`([a-z_][a-z0-9_]*)`", cell)}
    keyword_only = {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    name = function.__qualname__
    return [f"{name}: `{n}` not in the table" for n in sorted(keyword_only - named)] + [
        f"{name}: no argument `{n}`" for n in sorted(named - set(params))
    ]


def unnamed(names: list[str], p: Page) -> list[str]:
    """The names that are neither a code span nor a heading of the page."""
    named = set(p.spans) | {h.strip("`") for h in p.headings}
    return [n for n in names if n not in named]


def documented_make_targets() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    return re.findall(r"^([a-zA-Z0-9_-]+):.*## ", text, re.M)


# =========================================================================== the tests

PAGES = doc_files()
IDS = [str(p.relative_to(ROOT)) for p in PAGES]


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_relative_links_and_anchors_resolve(path: Path) -> None:
    assert not link_problems(page(path))


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_make_targets_named_exist(path: Path) -> None:
    assert not make_problems(page(path), make_targets())


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_router_commands_named_exist(path: Path) -> None:
    assert not cli_problems(page(path))


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_router_options_named_exist(path: Path) -> None:
    assert not option_problems(page(path))


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_settings_named_exist(path: Path) -> None:
    assert not setting_problems(page(path))


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_repository_paths_and_python_names_exist(path: Path) -> None:
    assert not name_problems(page(path))


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_code_blocks_parse(path: Path) -> None:
    assert not code_block_problems(page(path))


def test_the_checks_see_what_the_docs_name() -> None:
    """The extractors find something on the real pages: a check that matches nothing
    would pass for ever."""
    everything = [page(p) for p in PAGES]
    assert sum(len(links(p)) for p in everything) > 100
    assert sum(len(make_calls(p)) for p in everything) > 20
    assert sum(len(router_calls(p)) for p in everything) > 40
    assert sum(len(router_options(w)) for p in everything for w in router_calls(p)) > 80
    assert sum(len(named_settings(p)) for p in everything) > 100
    assert sum(len(repo_paths(p)) for p in everything) > 100
    assert sum(len(python_names(p)) for p in everything) > 10


def test_the_index_links_every_docs_page() -> None:
    pages = sorted((ROOT / "docs").rglob("*.md"))
    assert not unlinked_pages(page(ROOT / "docs" / "index.md"), pages)


def test_the_cli_reference_names_every_command() -> None:
    missing = unnamed(cli_paths(), page(ROOT / "docs" / "reference" / "cli.md"))
    assert not missing, f"commands not in docs/reference/cli.md: {missing}"


def test_the_make_reference_names_every_documented_target() -> None:
    targets = [f"make {t}" for t in documented_make_targets()]
    missing = unnamed(targets, page(ROOT / "docs" / "reference" / "make.md"))
    assert not missing, f"targets not in docs/reference/make.md: {missing}"


def test_the_client_reference_lists_every_keyword_argument() -> None:
    rows = {
        line.split("|")[1].strip(): line.split("|")[2]
        for line in (ROOT / "docs" / "reference" / "clients.md").read_text().splitlines()
        if line.startswith("| `")
    }
    calls: dict[str, Callable[..., object]] = {
        "`Sender(config, topology=None, *, ...)`": Sender.__init__,
        "`Sender.send(value, *, ...)`": Sender.send,
        "`Receiver(config, topology=None, *, ...)`": Receiver.__init__,
    }
    problems = [p for row, f in calls.items() for p in signature_problems(rows[row], f)]
    assert not problems


# --------------------------------------------------------------------------- the checks can fail


def fake(text: str, name: str = "docs/how-to/fake.md") -> Page:
    return parse(ROOT / name, text)


def test_slugs_follow_githubs_rules() -> None:
    assert slug("The delivery limit: `max_deliveries`") == "the-delivery-limit-max_deliveries"
    assert slug("Dead letters — `<topology>.dlq`") == "dead-letters--topologydlq"
    assert slug("Try it by hand: kcat and Kafka's console producer") == (
        "try-it-by-hand-kcat-and-kafkas-console-producer"
    )
    p = fake("# Top\n## Twice\n## Twice\n```sh\n# not a heading\n```\n")
    assert anchors(p) == {"top", "twice", "twice-1"}


def test_a_missing_file_or_anchor_is_caught() -> None:
    p = fake(
        "[a](no-such-page.md) ![b](../no-such.png) [c](../index.md#no-such-heading) "
        "[d](#nor-here)\n\n[e]: ../../no-such-folder/\n"
        "```sh\n[not a link](missing.md)\n```\n`[nor this](missing.md)`\n"
    )
    assert len(link_problems(p)) == 5
    assert not link_problems(fake("[ok](../index.md) [ok](#top) [x](https://example.org)\n# Top"))


def test_an_unknown_make_target_is_caught() -> None:
    p = fake('`make no-such-target`\n```sh\nmake demo ARGS="--policy wait"  # make nonsense\n```')
    assert make_problems(p, make_targets()) == [
        "docs/how-to/fake.md: `make no-such-target` is not a Makefile target"
    ]
    # an option given to make itself instead of ARGS: its value is taken for a target
    assert make_problems(fake("`make chaos --policy wait`"), make_targets())


def test_an_unknown_router_command_is_caught() -> None:
    p = fake(
        "`router table frobnicate <gid>` `router nosuch`\n"
        "```sh\n.venv/bin/router --config router.toml topics plan\n"
        'x="$(router spark jars)"\n```\n`from router import multicast` `router`\n'
        "`router table pin|drain|undrain|evict` `router relay --side send|receive`\n"
    )
    assert len(cli_problems(p)) == 2
    assert cli_problem(["table", "pin|nosuch"])
    assert cli_problem(["--config", "x.toml", "tabel", "list"])


def test_an_unknown_router_option_is_caught() -> None:
    p = fake(
        "`router table list --sides send` `router --config x.toml table show <gid> --json`\n"
        "```sh\npython -m router table show --config router.toml order-42\n"
        ".venv/bin/router table drain <d> --side send --yes [--wait --timeout 600] \\\n"
        "    --cell 1 --no-such-flag 2>&1 | grep --count x  # router relay --nope\n"
        'spark-submit --jars "$(router spark jars)" --conf spark.speculation=false\n'
        "router spark sender --checkpoint c --source rate --rate 5; router sweeper --once\n```\n"
        "`router table pin|drain --wait` `router <command> --help` `router table ... --cell`\n"
        "`router nosuch --x` `router relay --side send|receive` `router -h --log-level=INFO`\n"
    )
    fake_md = "docs/how-to/fake.md"
    assert option_problems(p) == [
        f"{fake_md}: `router table show --config`: no option --config in `router table show` "
        "(an option of `router`: it goes right after `router`)",
        f"{fake_md}: `router table drain --no-such-flag`: no option --no-such-flag in "
        "`router table drain`",
        f"{fake_md}: `router spark sender --rate`: no option --rate in `router spark sender`",
        f"{fake_md}: `router table list --sides`: no option --sides in `router table list`",
    ]
    assert "--checkpoint" in cli_options()["router spark receiver"]


def test_an_unknown_setting_is_caught() -> None:
    p = fake(
        "`routing.no_such_key` `unit.overlap_min_batch` ROUTER_UNIT__NO_SUCH_KEY "
        "`kafka.linger.ms` `metrics.md` `spark.speculation` `redis.Redis`\n"
        '```toml\n[routing]\nbusy_policy = "wait"\nbogus = 1\n[kafka.client_config]\n'
        '"linger.ms" = 5\n```\n'
    )
    assert setting_problems(p) == [
        "docs/how-to/fake.md: `routing.no_such_key` is not a setting of [routing]",
        "docs/how-to/fake.md: `unit.no_such_key` is not a setting of [unit]",
        "docs/how-to/fake.md: `routing.bogus` is not a setting of [routing]",
    ]


def test_a_missing_path_or_python_name_is_caught() -> None:
    p = fake(
        "`router/no_such_module.py` `ops/harness/no_such*.py` `router.table.no_such_name` "
        "`router.no_such_package` `router.events.DeadLetter` `hdfs:///router/x.stop`\n"
        "```python\nfrom router.sender import NoSuchSender\n```\n"
    )
    assert len(name_problems(p)) == 5
    ok = fake("`router/table/store/lua/route.lua` `router.table.steer` `router.receiver.Receiver`")
    assert not name_problems(ok)


def test_a_code_block_that_does_not_parse_is_caught() -> None:
    p = fake('```python\ndef (:\n```\n```toml\n= x\n```\n```json\n{"a": }\n```\n')
    assert len(code_block_problems(p)) == 3


def test_a_page_missing_from_the_index_is_caught() -> None:
    index = fake("[a](tutorial/first-program.md)", "docs/index.md")
    pages = [ROOT / "docs" / "tutorial" / "first-program.md", ROOT / "docs" / "orphan.md"]
    assert unlinked_pages(index, pages) == ["docs/orphan.md"]


def test_an_argument_missing_from_the_client_reference_is_caught() -> None:
    def send(value: bytes, *, guarantee_id: str, final: bool) -> None: ...

    assert signature_problems("`guarantee_id`, `no_such_argument`", send) == [
        "test_an_argument_missing_from_the_client_reference_is_caught.<locals>.send: "
        "`final` not in the table",
        "test_an_argument_missing_from_the_client_reference_is_caught.<locals>.send: "
        "no argument `no_such_argument`",
    ]


def test_a_command_or_target_missing_from_its_reference_is_caught() -> None:
    p = fake("# `router table`\n`router table list` `make demo`")
    assert unnamed(["router table", "router table list", "router table show"], p) == [
        "router table show"
    ]
    assert unnamed(["make demo", "make test"], p) == ["make test"]
    assert "router table show" in cli_paths()
    assert "test" in documented_make_targets()
