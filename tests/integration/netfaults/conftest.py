"""A Toxiproxy server of the test's own (ops/toxiproxy.sh builds it with Go, once); the test
skips, saying why, where it cannot be built."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.harness.stack.toxiproxy import Toxiproxy, ToxiproxyMissing, ensure_binary


@pytest.fixture
def toxiproxy(tmp_path: Path) -> Iterator[Toxiproxy]:
    try:
        ensure_binary()
    except ToxiproxyMissing as exc:
        pytest.skip(f"Toxiproxy cannot be built here (ops/toxiproxy.sh ensure): {exc}")
    with Toxiproxy.start(tmp_path / "toxiproxy") as tp:
        yield tp
