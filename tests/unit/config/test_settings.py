"""Settings and clients: file < environment < arguments; derived names; secrets never
printed; client handles destroyed off the caller's thread."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from router.backends.kafka.clients import dispose_in_background
from router.config import RoutingSettings, UnitSettings, load_settings
from router.errors import ConfigError


def test_topic_names_are_derived_from_the_topology_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROUTER_CONFIG", raising=False)
    s = load_settings(topology={"name": "shop", "send_queue_count": 2, "receive_queue_count": 3})
    assert s.topology.send_queues == ["shop.send.1", "shop.send.2"]
    assert s.topology.receive_queues == ["shop.recv.1", "shop.recv.2", "shop.recv.3"]
    assert s.topology.transfer_topic == "shop.transfer"
    assert s.topology.send_group == "shop.send-units"


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "router.toml"
    config.write_text(
        '[kafka]\nbootstrap_servers = "file:9092"\nsasl_password = "s3cret"\n'
        '[topology]\nname = "fromfile"\nreceive_units = 4\n'
    )
    monkeypatch.setenv("ROUTER_KAFKA__BOOTSTRAP_SERVERS", "env:9092")
    s = load_settings(config)
    assert s.kafka.bootstrap_servers == "env:9092"
    assert s.topology.name == "fromfile" and s.topology.receive_units == 4
    assert s.kafka.common()["sasl.password"] == "s3cret"
    assert "s3cret" not in s.model_dump_json() and "s3cret" not in repr(s)


def test_invalid_settings_are_refused_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="outside the bounds"):
        RoutingSettings(ttl_by_type={"x": 10}, min_ttl_ms=1000)
    with pytest.raises(ConfigError, match="topology name") as refused:  # was ValidationError
        load_settings(topology={"name": "bad name"})
    assert isinstance(refused.value.__cause__, ValidationError)
    with pytest.raises(FileNotFoundError):
        load_settings("/nonexistent/router.toml")


def test_client_handles_are_destroyed_off_the_callers_thread() -> None:
    """A librdkafka destroy that hangs must strand a daemon thread, never the caller."""
    destroyed_on: list[str] = []

    class Handle:
        def __del__(self) -> None:
            destroyed_on.append(threading.current_thread().name)

    owner = {"_admin": Handle()}
    dispose_in_background([owner.pop("_admin")])
    deadline = time.monotonic() + 5
    while not destroyed_on and time.monotonic() < deadline:
        time.sleep(0.01)
    assert destroyed_on == ["kafka-client-dispose"]


def test_the_production_cli_does_not_load_the_drivers() -> None:
    """The demo, chaos and benchmark drivers live in ops/, which the wheel does not ship;
    loading the `router` command must not import any of it."""
    code = (
        "import sys, router.cli.main, router.unit.loop, router.sweeper.loop; "
        "loaded = sorted(m for m in sys.modules if m == 'ops' or m.startswith('ops.')); "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_commit_overlaps_only_a_backlog() -> None:
    """A batch in flight of fewer than unit.overlap_min_batch messages commits before the
    next poll; 0 overlaps always; overlap_commit = false never overlaps."""
    unit = UnitSettings()
    assert unit.overlap_min_batch == 100
    assert not unit.overlaps(1) and not unit.overlaps(99)
    assert unit.overlaps(100) and unit.overlaps(500)
    always = UnitSettings(overlap_min_batch=0)
    assert always.overlaps(1)
    never = UnitSettings(overlap_commit=False, overlap_min_batch=0)
    assert not never.overlaps(500)
    with pytest.raises(ValidationError):
        UnitSettings(overlap_min_batch=-1)
