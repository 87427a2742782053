"""A sender's journal of open groups in the real Redis (`router.sender.journal`,
`router.state.store`): the order of its writes, fencing, abandoning; the partition's tail
is given (the Kafka side is proven by `test_sender_resume`)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest
import redis

from router.contract.request import request
from router.errors import InvalidRequest
from router.sender import Sender
from router.sender.groups import OpenGroups
from router.sender.journal import Journal
from router.state.groups import GroupStatus
from router.state.sender import TailRecord
from router.state.store import SenderFenced, SenderStore, StatusStore, find_group
from router.table import view as tableview
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique

TP = ("shop.send.0", 1)


def journal(client: redis.Redis, prefix: str, tails: dict[str, list[TailRecord]]) -> Journal:
    j = Journal(SenderStore(client, "s1", prefix))

    def probe(_c: Mapping[str, Any], tp: tuple[str, int], start: int, gids: set[str]) -> Any:
        assert tp == TP
        return {g: tails.get(g, []) for g in gids}

    j.resume({}, probe)
    return j


def send(j: Journal, gid: str, seq: int, final: bool = False, new: bool = False) -> Any:
    r = request([], guarantee_id=gid, final=final, message_type=None, ttl_ms=None, delivery=None)
    return j.record(r, TP, seq, new, 40, threading.Lock(), lambda: None)


def test_a_group_is_recorded_before_its_first_member_and_removed_after_its_final(
    redis_client: redis.Redis, redis_prefix: str
) -> None:
    j = journal(redis_client, redis_prefix, {})
    track = send(j, "A", 0, new=True)
    stored = j.store.load()["A"]
    assert (stored.tp, stored.scan_from, stored.acked_seq) == (TP, 40, -1)
    j.delivered(*track[:3], TP, 50, False)
    j.sync()
    assert (j.store.load()["A"].acked_seq, j.store.load()["A"].scan_from) == (0, 51)
    track = send(j, "A", 1, final=True)
    assert "A" in j.store.load(), "kept until the final is acknowledged"
    j.delivered(*track[:3], TP, 52, True)
    j.sync()
    assert j.store.load() == {}


def test_a_restart_resumes_from_the_partition_and_drops_finished_groups(
    redis_client: redis.Redis, redis_prefix: str
) -> None:
    first = journal(redis_client, redis_prefix, {})
    for gid in ("A", "B", "C"):
        send(first, gid, 0, new=True)
    tails = {
        "A": [TailRecord(41, 0, False), TailRecord(44, 1, False)],  # 1 landed, never acked
        "B": [TailRecord(42, 0, False), TailRecord(45, 1, True)],  # finished
    }
    groups = OpenGroups(3600)
    second = Journal(SenderStore(redis_client, "s1", redis_prefix))
    second.resume_into(groups, {}, lambda _c, _tp, _s, gids: {g: tails.get(g, []) for g in gids})
    assert {g: (o.tp, o.next_seq) for g, o in groups.groups().items()} == {
        "A": (TP, 2),
        "C": (TP, 0),
    }
    assert set(second.store.load()) == {"A", "C"}
    assert second.store.load()["A"].scan_from == 45
    with pytest.raises(SenderFenced):
        send(first, "D", 0, new=True)  # the old process, if it still ran, writes nothing


def test_abandon_forgets_a_group_and_a_late_checkpoint_never_touches_a_reopened_id(
    redis_client: redis.Redis, redis_prefix: str
) -> None:
    j = journal(redis_client, redis_prefix, {})
    old = send(j, "A", 0, new=True)
    assert j.abandon("A") is not None
    assert j.store.load() == {}
    send(j, "A", 0, new=True)  # the ID opened again
    j.delivered(*old[:3], TP, 99, False)  # the old opening's acknowledgement, late
    j.sync()
    assert j.store.load()["A"].acked_seq == -1


def test_table_show_finds_the_group_at_both_ends(
    redis_client: redis.Redis, redis_prefix: str
) -> None:
    """`router table show` reads a sender's record and receivers' statuses of a group."""
    j = journal(redis_client, redis_prefix, {})
    send(j, "A", 0, new=True)
    StatusStore(redis_client, "billing", redis_prefix).write(
        [GroupStatus("A", "shop.recv.2", 0, 17, 4, False, 5)]
    )
    senders, receivers = find_group(redis_client, "A", redis_prefix)
    assert senders["s1"].tp == TP and receivers["billing"].last_seq == 4
    text = "\n".join(tableview.ends_lines(senders, receivers))
    assert "sender s1: open on shop.send.0[1], next seq 1" in text
    assert "receiver billing: in progress on shop.recv.2[0], last seq done 4, 5 done" in text
    assert set(tableview.ends_json(senders, receivers)) == {"senders", "receivers"}
    assert find_group(redis_client, "nope", redis_prefix) == ({}, {})


def test_a_reserved_guarantee_id_is_refused_before_anything_is_recorded(
    kafka_bootstrap: str, new_topic: TopicFactory, redis_url: str, redis_prefix: str
) -> None:
    """A '~' ID (the waiting room's pseudo-groups' names) is refused as the call is read:
    no open group, nothing journaled, nothing resumed by a new Sender of the same ID."""
    kw: dict[str, Any] = {
        "send_queues": [new_topic("send")],
        "units_group": unique("units"),
        "sender_id": unique("sender"),
        "state": redis_url,
        "state_prefix": redis_prefix,
    }
    with Sender({"bootstrap.servers": kafka_bootstrap}, **kw) as s:
        with pytest.raises(InvalidRequest, match="reserves for its waiting room"):
            s.send(b"v", guarantee_id="~x")
        with pytest.raises(InvalidRequest, match="reserves for its waiting room"):
            s.send(b"v", headers=[("guarantee-id", b"~y")], final=True)
        s.send(b"v", guarantee_id="ok")
        assert set(s.open_groups()) == {"ok"}
    with Sender({"bootstrap.servers": kafka_bootstrap}, **kw) as again:
        assert set(again.open_groups()) == {"ok"}
