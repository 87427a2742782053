"""docs/reference/cli.md's options column holds to the CLI (pure: reads the file, the click CLI
and the Spark jobs' argparse parsers; no servers).

A row names one command when its first cell is one code span `router ...`, a command path
of the CLI; its options are the `-x`/`--xx` words of the code spans in its second cell
(`-s/--side` is one option in two forms; values, `[ ]` and `=VALUE` are not options), and a
second cell reading "the same" has the row above's. For every such row, both ways:

* listed but not taken: every option the row lists is one of the command's;
* taken but not listed: every option of the command (`cli_option_forms`: click's, for
  `router spark sender|receiver` the job's parser's), but the help option, is listed in
  its row, unless `LEFT_ELSEWHERE` says where the page explains it instead.

`LEFT_ELSEWHERE` has no stale entry: each excuses some option of some row. That the page names
every command at all is test_links_and_names.py's check (7).

The table below `ROOT_HEADING` lists the root group's options (`router --config FILE ...`),
one a row in its first cell: both ways too, against `router`'s, with no allow-list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from tests.fixtures.cli_names import CliOption, cli_option_forms
from tests.fixtures.mdtables import cells
from tests.fixtures.paths import ROOT

CLI_MD = ROOT / "docs" / "reference" / "cli.md"

# The options the page deliberately explains elsewhere than in their row: (a command, or a group
# for every command below it; an option's form, or "*" for all its options) -> why.
LEFT_ELSEWHERE: dict[tuple[str, str], str] = {
    # The Tables section's prose: "With `topology.cells` > 1 every `table` command takes
    # `--cell N`", then what it selects for each (every cell for list and show, the cell of
    # the destination or group for the steering commands): one meaning per command, kept in
    # one place rather than seven rows.
    ("router table", "--cell"): "every table command's --cell is in the section's prose",
    # The Spark rows point to the job's own argparse help ("the job's own options
    # (`router spark sender --help`)"); docs/how-to/spark-jobs.md explains them in use.
    ("router spark sender", "*"): "the job's own options: `router spark sender --help`",
    ("router spark receiver", "*"): "the job's own options: `router spark receiver --help`",
}

ROOT_HEADING = "## Options of every command"

ROW_COMMAND = re.compile(r"`(router(?: [a-z][a-z0-9-]*)*)`")
OPTION = re.compile(r"-{1,2}[A-Za-z][\w-]*")


def listed_options(cell: str) -> list[tuple[str, ...]]:
    """The options an options cell lists, each as its forms: `--side send|receive` is
    `--side`, `-s/--side` one option, `[--wait]` `--wait`, `--port=N` `--port`."""
    found = []
    for span in re.findall(r"`([^`]+)`", cell):
        for word in span.replace("\\|", "|").split():
            forms = tuple(f.split("=")[0] for f in word.strip("[]").split("/"))
            if all(OPTION.fullmatch(f) for f in forms):
                found.append(forms)
    return found


def section_table(text: str, heading: str) -> list[list[str]]:
    """The cells of each body row (below the header and its `|---|` line) of the first table
    after the line `heading`, before the next heading; none if there is no such table."""
    lines = text.splitlines()
    if heading not in lines:
        return []
    table: list[str] = []
    for line in lines[lines.index(heading) + 1 :]:
        if line.startswith("#") or (table and not line.lstrip().startswith("|")):
            break
        if line.lstrip().startswith("|"):
            table.append(line)
    return [cells(line) for line in table[2:]]


def reference_rows(text: str) -> list[tuple[str, list[tuple[str, ...]]]]:
    """(the command, the options listed) of every table row that names one command."""
    commands = cli_option_forms()
    rows: list[tuple[str, list[tuple[str, ...]]]] = []
    above: list[tuple[str, ...]] | None = None  # the row above's options, in the same table
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            above = None
            continue
        row = cells(line)
        m = ROW_COMMAND.fullmatch(row[0])
        if m is None or m.group(1) not in commands or len(row) < 2:
            continue
        if row[1].lower() == "the same" and above is not None:
            options = above
        else:
            options = listed_options(row[1])
        rows.append((m.group(1), options))
        above = options
    return rows


def excuse(
    command: str, option: CliOption, allowed: Mapping[tuple[str, str], str]
) -> tuple[str, str] | None:
    """The entry of `allowed` that leaves `option` of `command` out of its row, if any."""
    for entry in allowed:
        where, name = entry
        if (command == where or command.startswith(f"{where} ")) and (
            name == "*" or name in option.names
        ):
            return entry
    return None


def option_problems(
    command: str, listed: list[tuple[str, ...]], allowed: Mapping[tuple[str, str], str]
) -> tuple[list[str], set[tuple[str, str]]]:
    """The options `listed` for `command` against the command's, both ways (module
    docstring), and the entries of `allowed` that excused an option left out."""
    options = cli_option_forms()[command]
    names = {n for o in options for n in o.names}
    problems = [
        f"`{command}`: {form} listed but not taken"
        for forms in listed
        for form in forms
        if form not in names
    ]
    used: set[tuple[str, str]] = set()
    written = {form for forms in listed for form in forms}
    for option in options:
        if "--help" in option.names or not written.isdisjoint(option.names):
            continue
        entry = excuse(command, option, allowed)
        if entry is None:
            problems.append(f"`{command}`: {option} taken but not listed")
        else:
            used.add(entry)
    return problems, used


def reference_option_problems(
    text: str, allowed: Mapping[tuple[str, str], str] = LEFT_ELSEWHERE
) -> list[str]:
    """The rows' options against the commands' (module docstring), and the entries of
    `allowed` that excuse nothing."""
    problems = []
    used: set[tuple[str, str]] = set()
    for command, listed in reference_rows(text):
        row_problems, row_used = option_problems(command, listed, allowed)
        problems += row_problems
        used |= row_used
    problems += [
        f"LEFT_ELSEWHERE[{entry!r}] excuses nothing: remove it"
        for entry in allowed
        if entry not in used
    ]
    return problems


def root_option_problems(text: str) -> list[str]:
    """The options the table below `ROOT_HEADING` lists, each in a row's first cell, against
    the root group's (`router`'s), both ways."""
    rows = section_table(text, ROOT_HEADING)
    if not rows:
        return [f"no table below {ROOT_HEADING!r}"]
    listed = [forms for row in rows for forms in listed_options(row[0])]
    return option_problems("router", listed, allowed={})[0]


# =========================================================================== the tests


def test_the_cli_reference_lists_each_commands_options() -> None:
    problems = reference_option_problems(CLI_MD.read_text())
    assert not problems, "docs/reference/cli.md's options column:\n" + "\n".join(problems)


def test_the_check_sees_the_reference_rows() -> None:
    """The row parser finds the real table's rows and their options: a check that matches
    nothing would pass for ever."""
    rows = dict(reference_rows(CLI_MD.read_text()))
    assert len(rows) > 25
    assert rows["router table drain"] == [
        ("--side",),
        ("--wait",),
        ("--timeout",),
        ("--yes",),
        ("--json",),
    ]
    assert rows["router acls apply"] == rows["router acls plan"] != []  # "the same"
    assert rows["router send-unit"] == []


def test_a_wrong_or_missing_option_in_the_cli_reference_is_caught() -> None:
    text = (
        "| command | arguments | what it does |\n"
        "|---|---|---|\n"
        "| `router sweeper` | `--once`: one round | sweeps |\n"
        "| `router table undrain` | `DESTINATION`, `--side send\\|receive`, `--cell N`, "
        "`--yes`, `--jsn` | "
        "ends the drain, `--json` |\n"
    )
    assert reference_option_problems(text, allowed={}) == [
        "`router table undrain`: --jsn listed but not taken",
        "`router table undrain`: --json taken but not listed",
    ]


def test_the_allow_list_excuses_only_its_options_and_goes_stale() -> None:
    text = (
        "| `router table evict` | `DESTINATION`, `--side`, `--yes` | evicts |\n"
        "| `router spark receiver` | the job's own options, `-s/--nope` | receives |\n"
        "| `router acls plan` | `--role R`, `--principal P`, `--receive-queue Q` | plans |\n"
        "| `router acls apply` | the same | applies |\n"
    )
    allowed = {
        ("router table", "--cell"): "in the prose",
        ("router spark receiver", "*"): "the job's own --help",
        ("router acls", "--role"): "nothing left out: stale",
    }
    assert reference_option_problems(text, allowed) == [
        "`router table evict`: --json taken but not listed",
        "`router spark receiver`: -s listed but not taken",
        "`router spark receiver`: --nope listed but not taken",
        "LEFT_ELSEWHERE[('router acls', '--role')] excuses nothing: remove it",
    ]


def test_the_cli_reference_lists_the_root_options() -> None:
    problems = root_option_problems(CLI_MD.read_text())
    assert not problems, "docs/reference/cli.md's options of every command:\n" + "\n".join(problems)


def test_a_wrong_or_missing_root_option_in_the_cli_reference_is_caught() -> None:
    text = (
        f"{ROOT_HEADING}\n"
        "\n"
        "Given before the command: `router --config router.toml table list`.\n"
        "\n"
        "| option | meaning |\n"
        "|---|---|\n"
        "| `--config FILE` | the TOML settings file |\n"
        "| `--quiet` | less |\n"
        "| `--version` | print the version and exit |\n"
        "\n"
        "## Processes\n"
        "\n"
        "| `--log-level LEVEL` | in another section's table: not the root table's |\n"
    )
    assert root_option_problems(text) == [
        "`router`: --quiet listed but not taken",
        "`router`: --log-level taken but not listed",
    ]
    assert root_option_problems("| `--config FILE` | no heading |\n") == [
        "no table below '## Options of every command'"
    ]
