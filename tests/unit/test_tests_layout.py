"""The tests' own tree says where things are (pure: reads files). Tests mirror the packages
they test; helpers that tests share live in tests/fixtures/, never in a test module or a
conftest.py:

* no module under tests/ imports a test module (`test_*`) or a conftest, whatever the
  form (`import`, `from ... import`, relative, inside a function, or a module's dotted
  name in a string, as `importlib` or `python -m` take it);
* a module under tests/ that is neither a test module, a conftest.py nor a package's
  `__init__.py` is a fixture module, in tests/fixtures/;
* tests/unit/ holds directly only the tests of top-level things (`TOP_LEVEL`);
* every folder of tests/unit/ mirrors a package: `router/<...>`, `ops/harness/<...>`
  (and `ops/drivers`: what the drivers print), `spark_jobs`, `docs`;
* every folder under tests/ is a package, and no two test files share a name.

Each rule is a function returning its problems: run on the real tree (none) and on a
broken copy (each problem found)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.fixtures.paths import ROOT

TOP_LEVEL = {
    "test_errors.py",  # router/errors.py
    "test_layout.py",  # the router/ tree and its layers contract
    "test_tests_layout.py",  # this file: the tests/ tree
}
"""The only test files directly in tests/unit/: they test top-level things."""

OPS_EXTRA = {"drivers"}  # tests/unit/ops/drivers: ops/*.py's output (ops/harness/console.py)
UNIT_EXTRA = {"ops", "spark_jobs", "docs"}  # besides router's packages


def modules(tests: Path) -> Iterator[Path]:
    for path in sorted(tests.rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield path


def is_test_or_conftest(name: str) -> bool:
    """`name` (one component of a dotted module name) names a test module or a conftest."""
    return name.startswith("test_") or name == "conftest"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every module `path` imports or names as a module in a string."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path, root)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            yield node.lineno, base
            for alias in node.names:  # `from tests.unit import test_x` imports a module too
                yield node.lineno, f"{base}.{alias.name}"
        elif isinstance(node, ast.Constant) and re.fullmatch(r"tests(\.\w+)+", str(node.value)):
            yield node.lineno, str(node.value)


def imports_of_tests(tests: Path) -> list[str]:
    """Modules that import a test module or a conftest (tests' own modules only)."""
    root = tests.parent
    found = set()
    for path in modules(tests):
        for line, name in imported(path, root):
            parts = name.split(".")
            if parts[0] != tests.name:
                continue
            at = next((i for i, p in enumerate(parts) if i and is_test_or_conftest(p)), None)
            if at is not None and root.joinpath(*parts[: at + 1]).with_suffix(".py").is_file():
                module = ".".join(parts[: at + 1])
                found.add(f"{path.relative_to(root)}:{line} imports {module}")
    return [f"{problem}: move what it needs to fixtures" for problem in sorted(found)]


def helpers_outside_fixtures(tests: Path) -> list[str]:
    fixtures = tests / "fixtures"
    return [
        f"{path.relative_to(tests.parent)}: a helper module outside {fixtures.name}/"
        for path in modules(tests)
        if not (is_test_or_conftest(path.stem) or path.name == "__init__.py")
        and fixtures not in path.parents
    ]


def stray_unit_tests(tests: Path) -> list[str]:
    unit = tests / "unit"
    return [
        f"{path.relative_to(tests.parent)}: belongs in the folder of the package it tests"
        for path in sorted(unit.glob("test_*.py"))
        if path.name not in TOP_LEVEL
    ]


def folders_that_mirror_nothing(tests: Path, repo: Path) -> list[str]:
    unit = tests / "unit"
    problems = []
    for folder in sorted(p for p in unit.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        if "__pycache__" in folder.parts:
            continue
        first, *rest = folder.relative_to(unit).parts
        if first == "ops":
            if rest and rest[0] in OPS_EXTRA:
                mirrored = len(rest) == 1
            else:
                mirrored = (repo / "ops" / "harness" / Path(*rest) / "__init__.py").is_file()
        elif first in UNIT_EXTRA:
            mirrored = not rest or first == "docs"
        else:
            mirrored = (repo / "router" / first / Path(*rest) / "__init__.py").is_file()
        if not mirrored:
            problems.append(f"{folder.relative_to(tests.parent)}/ mirrors no package")
    return problems


def folders_without_init(tests: Path) -> list[str]:
    return [
        f"{folder.relative_to(tests.parent)}/ has no __init__.py"
        for folder in sorted({p.parent for p in modules(tests)} | {tests})
        if not (folder / "__init__.py").is_file()
    ]


def shared_test_names(tests: Path) -> list[str]:
    seen: dict[str, list[str]] = {}
    for path in modules(tests):
        if path.name.startswith("test_"):
            seen.setdefault(path.name, []).append(str(path.relative_to(tests.parent)))
    return [f"{name}: {', '.join(paths)}" for name, paths in seen.items() if len(paths) > 1]


def problems(tests: Path, repo: Path) -> list[str]:
    return [
        *imports_of_tests(tests),
        *helpers_outside_fixtures(tests),
        *stray_unit_tests(tests),
        *folders_that_mirror_nothing(tests, repo),
        *folders_without_init(tests),
        *shared_test_names(tests),
    ]


def test_the_tests_tree_mirrors_the_packages_and_shares_helpers_through_fixtures() -> None:
    found = problems(ROOT / "tests", ROOT)
    assert not found, "\n".join(found)


def test_each_rule_finds_what_it_is_for(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    for folder in ("", "fixtures", "unit", "unit/table", "unit/nowhere", "integration", "odd"):
        (tests / folder).mkdir(exist_ok=True)
        if folder != "odd":
            (tests / folder / "__init__.py").write_text("")
    (tmp_path / "router" / "table").mkdir(parents=True)
    (tmp_path / "router" / "table" / "__init__.py").write_text("")
    (tests / "conftest.py").write_text("ROOT = 1\n")
    (tests / "fixtures" / "fakes.py").write_text("X = 1\n")
    (tests / "unit" / "table" / "test_room.py").write_text(
        "from tests.conftest import ROOT\n"
        "from tests.fixtures.fakes import X\n"
        "from . import test_other\n"
        "from .test_other import helper\n"
    )
    (tests / "unit" / "table" / "test_other.py").write_text(
        "def helper() -> None:\n"
        "    import tests.unit.table.test_room\n"
        "ARGS = ['-m', 'tests.unit.table.test_room']\n"
    )
    (tests / "unit" / "test_stray.py").write_text("")
    (tests / "unit" / "nowhere" / "test_room.py").write_text("")
    (tests / "integration" / "queues.py").write_text("")
    (tests / "odd" / "test_odd.py").write_text("")
    assert imports_of_tests(tests) == [
        "tests/unit/table/test_other.py:2 imports tests.unit.table.test_room: "
        "move what it needs to fixtures",
        "tests/unit/table/test_other.py:3 imports tests.unit.table.test_room: "
        "move what it needs to fixtures",
        "tests/unit/table/test_room.py:1 imports tests.conftest: move what it needs to fixtures",
        "tests/unit/table/test_room.py:3 imports tests.unit.table.test_other: "
        "move what it needs to fixtures",
        "tests/unit/table/test_room.py:4 imports tests.unit.table.test_other: "
        "move what it needs to fixtures",
    ]
    assert helpers_outside_fixtures(tests) == [
        "tests/integration/queues.py: a helper module outside fixtures/"
    ]
    assert stray_unit_tests(tests) == [
        "tests/unit/test_stray.py: belongs in the folder of the package it tests"
    ]
    assert folders_that_mirror_nothing(tests, tmp_path) == [
        "tests/unit/nowhere/ mirrors no package"
    ]
    assert folders_without_init(tests) == ["tests/odd/ has no __init__.py"]
    assert shared_test_names(tests) == [
        "test_room.py: tests/unit/nowhere/test_room.py, tests/unit/table/test_room.py"
    ]
