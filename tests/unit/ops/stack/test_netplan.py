"""The network-fault plan and a unit's choice of link (pure: no proxy, no process)."""

from __future__ import annotations

import io
import itertools
import json
import random
import socket
from pathlib import Path
from typing import Any

import pytest

from ops.harness.stack.fleet import Proc
from ops.harness.stack.localstack import ephemeral_low, listener_port
from ops.harness.stack.netlinks import Link, choose_slot
from ops.harness.stack.netplan import KINDS, RESET_HOLD_S, NetFault, plan

SLOTS = ["send-unit.0", "send-unit.1", "receive-unit.0"]


def test_every_kind_in_turn_within_the_sending_time() -> None:
    faults = plan(random.Random(1), 12, 100.0, SLOTS, cut_s=20, slow_s=10)
    assert sorted(f.kind for f in faults) == sorted(KINDS * 2)
    assert all(f.at_s >= 10.0 for f in faults)
    holds = {f.kind: f.hold_s for f in faults}
    assert holds["redis-cut"] == holds["kafka-cut"] == 20
    assert holds["redis-slow"] == holds["kafka-slow"] == 10
    assert holds["redis-reset"] == holds["kafka-reset"] == RESET_HOLD_S
    assert [f.at_s for f in faults] == sorted(f.at_s for f in faults)


@pytest.mark.parametrize("seed", range(20))
def test_two_faults_never_hit_one_slot_at_once(seed: int) -> None:
    faults = plan(random.Random(seed), 10, 30.0, SLOTS[:2], cut_s=20)
    for slot in SLOTS[:2]:
        mine = sorted((f for f in faults if f.slot == slot), key=lambda f: f.at_s)
        for a, b in itertools.pairwise(mine):
            assert a.at_s + a.hold_s <= b.at_s + 1e-9, (a, b)


def test_the_kinds_chosen_and_what_a_fault_says() -> None:
    faults = plan(random.Random(3), 2, 50.0, SLOTS, kinds=("redis-cut", "kafka-cut"), cut_s=16)
    assert [f.kind for f in faults] == ["redis-cut", "kafka-cut"]
    assert [f.server for f in faults] == ["redis", "kafka"]
    assert {f.effect for f in faults} == {"cut"}
    assert faults[0].describe() == f"{faults[0].slot} cut off from redis for 16 s"
    slow = NetFault(1.0, "kafka-slow", "send-unit.0", 10.0)
    assert slow.describe() == "send-unit.0 kafka slowed by 100-500 ms for 10 s"
    with pytest.raises(ValueError, match="unknown network fault kinds"):
        plan(random.Random(1), 1, 10.0, SLOTS, kinds=("redis-flood",))
    with pytest.raises(ValueError, match="need unit links"):
        plan(random.Random(1), 1, 10.0, [])
    assert plan(random.Random(1), 0, 10.0, []) == []


class FakePopen:
    def __init__(self, alive: bool) -> None:
        self.returncode = None if alive else -9
        self.pid = 1

    def poll(self) -> int | None:
        return self.returncode


def proc(role: str, slot: str, alive: bool = True) -> Proc:
    popen: Any = FakePopen(alive)
    return Proc(role, 1, popen, Path("/dev/null"), io.BytesIO(), slot=slot)


def test_a_unit_takes_its_roles_link_with_the_fewest_live_processes() -> None:
    links = [
        Link("send-unit.0", "send-unit", 1, 2),
        Link("send-unit.1", "send-unit", 3, 4),
        Link("receive-unit.0", "receive-unit", 5, 6),
    ]
    assert choose_slot("send-unit", links, []).slot == "send-unit.0"
    running = [proc("send-unit", "send-unit.0")]
    assert choose_slot("send-unit", links, running).slot == "send-unit.1"
    # A replacement takes the link its killed predecessor left.
    running = [proc("send-unit", "send-unit.0", alive=False), proc("send-unit", "send-unit.1")]
    assert choose_slot("send-unit", links, running).slot == "send-unit.0"
    assert choose_slot("receive-unit", links, running).slot == "receive-unit.0"
    with pytest.raises(ValueError, match="no unit link"):
        choose_slot("sweeper", links, running)


def test_a_links_settings_point_at_its_proxies() -> None:
    link = Link("send-unit.0", "send-unit", 7001, 7002)
    assert link.env("redis://user:pw@127.0.0.1:6379/0") == {
        "ROUTER_REDIS__URL": "redis://user:pw@127.0.0.1:7001/0",
        "ROUTER_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:7002",
    }
    assert link.env("redis://127.0.0.1:6379/0")["ROUTER_REDIS__URL"] == "redis://127.0.0.1:7001/0"
    assert link.proxy("kafka") == "send-unit.0.kafka"


def test_a_link_on_the_replicated_servers_has_a_proxy_per_broker_data_node_and_sentinel() -> None:
    """--ha: every broker's listener of the unit through a proxy of its own; Redis through
    Sentinel: the unit asks its own proxies to the Sentinels, and maps each data node's
    announced address to its own proxy (redis.address_map); every kind can be planned."""
    link = Link(
        "receive-unit.1",
        "receive-unit",
        None,
        7002,
        (7004, 7006),
        redis_nodes=((6391, 7101), (6392, 7102)),
        sentinels=(7201, 7202, 7203),
    )
    env = link.env("redis://127.0.0.1:6379/0")
    assert env == {
        "ROUTER_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:7002,127.0.0.1:7004,127.0.0.1:7006",
        "ROUTER_REDIS__SENTINELS": json.dumps(
            ["127.0.0.1:7201", "127.0.0.1:7202", "127.0.0.1:7203"]
        ),
        "ROUTER_REDIS__ADDRESS_MAP": json.dumps(
            {"127.0.0.1:6391": "127.0.0.1:7101", "127.0.0.1:6392": "127.0.0.1:7102"}
        ),
    }
    assert link.proxies("kafka") == [
        "receive-unit.1.kafka",
        "receive-unit.1.kafka2",
        "receive-unit.1.kafka3",
    ]
    assert link.proxies("redis") == [
        "receive-unit.1.redis1",
        "receive-unit.1.redis2",
        "receive-unit.1.sentinel1",
        "receive-unit.1.sentinel2",
        "receive-unit.1.sentinel3",
    ]
    faults = plan(random.Random(1), len(KINDS), 100.0, ["receive-unit.1"], KINDS)
    assert sorted(f.kind for f in faults) == sorted(KINDS)


def test_a_listener_port_is_free_and_below_the_ephemeral_range(tmp_path: Path) -> None:
    """A unit's fault-proxy port is bound only once the servers are up: below the range
    the kernel gives outgoing connections, no client's connection takes it meanwhile."""
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("40000\t60999\n")
    assert ephemeral_low(ranges) == 40_000
    assert ephemeral_low(tmp_path / "missing") == 32_768
    ranges.write_text("1024 65535\n")
    assert ephemeral_low(ranges) == 10_001  # a range from 1024: still room below it
    port = listener_port()
    assert 10_000 <= port < ephemeral_low()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free
