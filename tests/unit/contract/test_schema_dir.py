"""Where the schemas are read from: the package's own copy (an installed wheel), else the
checkout's `schemas/`, and never a `schemas` folder that merely lies beside the package."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.contract import schemas
from router.contract.schemas import find_schemas
from tests.fixtures.paths import ROOT


def _tree(base: Path, *folders: str, files: tuple[str, ...] = ()) -> Path:
    for folder in folders:
        (base / folder).mkdir(parents=True)
    for name in files:
        (base / name).write_text("")
    return base / "router"


def test_the_installed_copy_comes_first(tmp_path: Path) -> None:
    package = _tree(tmp_path, "router/_schemas", "schemas", files=("pyproject.toml",))
    assert find_schemas(package) == package / "_schemas"


def test_a_checkout_reads_its_schemas_folder(tmp_path: Path) -> None:
    package = _tree(tmp_path, "router", "schemas", files=("pyproject.toml",))
    assert find_schemas(package) == tmp_path / "schemas"


def test_a_schemas_folder_beside_an_installed_package_is_not_taken(tmp_path: Path) -> None:
    package = _tree(tmp_path, "router", "schemas")  # site-packages/schemas of someone else
    with pytest.raises(FileNotFoundError, match="_schemas"):
        find_schemas(package)


def test_this_checkout_reads_the_repository_schemas() -> None:
    assert schemas.schema_dir() in (ROOT / "schemas", ROOT / "router" / "_schemas")
    assert "router.events.DeadLetter" in schemas.names()
