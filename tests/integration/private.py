"""What the private-server suites (ha, secure, sentinel) share: a collection hook that
skips their heavy tests unless their `make` target asked for them, and a session's own
servers (free ports, a folder of the session's own) from an `ops/*.sh` script, stopped
at the end."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[2]


class Servers(Protocol):
    def up(self) -> None: ...
    def down(self) -> None: ...


S = TypeVar("S", bound=Servers)


def heavy_only_with(
    marker: str, env: str, reason: str
) -> Callable[[pytest.Config, list[pytest.Item]], None]:
    """A `pytest_collection_modifyitems` hook: tests marked `marker` are skipped with
    `reason` unless the environment variable `env` is set (by their make target)."""

    def hook(config: pytest.Config, items: list[pytest.Item]) -> None:
        if os.environ.get(env):
            return
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)

    return hook


def private_servers(
    make: Callable[[Path, Path], S],
    script: str,
    tmp_path_factory: pytest.TempPathFactory,
    what: str,
    start: bool = True,
) -> Iterator[S]:
    """The body of a session fixture: `make(ops/<script>, a fresh folder)` (a harness's
    `private` constructor), started now unless `start` is false (then on first use), and
    stopped at the end. Skipped unless the stack is the project's own local one."""
    if os.environ.get("ROUTER_STACK", "local") != "local":
        pytest.skip(f"the {what} is the project's own local one (ops/{script})")
    servers = make(ROOT / "ops" / script, tmp_path_factory.mktemp(Path(script).stem))
    try:
        if start:
            servers.up()
        yield servers
    finally:
        servers.down()
