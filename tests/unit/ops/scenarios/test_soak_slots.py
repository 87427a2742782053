"""The soak's role slots (no servers): a process that died leaves its slot to the next new
process of its role, so that a slot's RSS series follows whoever does that slot's work."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ops.harness.scenarios.soak_sample import Slots, rss_bytes


@dataclass
class FakeProc:
    role: str
    index: int
    alive: bool = True


def test_a_replacement_takes_the_slot_its_predecessor_left() -> None:
    s1, s2 = FakeProc("send-unit", 1), FakeProc("send-unit", 2)
    r1, sw = FakeProc("receive-unit", 1), FakeProc("sweeper", 1)
    procs: list[Any] = [s1, s2, r1, sw]
    slots = Slots()
    slots.update(procs)
    assert dict(slots.items()) == {
        "send-unit#1": s1,
        "send-unit#2": s2,
        "receive-unit#1": r1,
        "sweeper#1": sw,
    }
    s1.alive = False
    assert slots.proc("send-unit", 1) is None  # dead: no victim there until replaced
    s3 = FakeProc("send-unit", 3)
    procs.append(s3)
    slots.update(procs)
    assert slots.proc("send-unit", 1) is s3 and slots.proc("send-unit", 2) is s2
    # a process more than the slots held at the start gets a new slot
    s4 = FakeProc("send-unit", 4)
    procs.append(s4)
    slots.update(procs)
    assert slots.proc("send-unit", 3) is s4


def test_rss_of_this_process_and_of_none() -> None:
    rss = rss_bytes(os.getpid())
    assert rss is not None and rss > 1_000_000
    assert rss_bytes(2**22 + 12345) is None  # above the default pid_max: no such process
