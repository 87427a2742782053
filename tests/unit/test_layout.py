"""The tree says what the architecture is (pure: reads files): router/ holds packages only,
each package says what lives in it, and the layers contract of `make lint` names every
package, so that a new one cannot escape the layering."""

from __future__ import annotations

import ast
import tomllib

from tests.fixtures.paths import ROOT

ROUTER = ROOT / "router"


def test_router_holds_packages_only_at_its_top_level() -> None:
    modules = sorted(p.name for p in ROUTER.glob("*.py"))
    assert modules == ["__init__.py", "__main__.py", "errors.py"], modules


def test_every_router_package_has_a_docstring() -> None:
    missing = [
        str(init.relative_to(ROOT))
        for init in sorted(ROUTER.rglob("__init__.py"))
        if not ast.get_docstring(ast.parse(init.read_text()))
    ]
    assert not missing, f"packages that do not say what lives in them: {missing}"


def test_the_layers_contract_names_every_router_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    top = next(c for c in config["contracts"] if c.get("containers") == ["router"])
    named = {name.strip() for layer in top["layers"] for name in layer.split("|")}
    packages = {p.parent.name for p in ROUTER.glob("*/__init__.py")} | {"errors"}
    assert named == packages, (
        f"packages outside the layers: {sorted(packages - named)}; "
        f"layers that name no package: {sorted(named - packages)}"
    )
