"""Adversarial review of the bound on staged messages (routing.max_staged_messages,
decision UNSTAGED '!W', GroupStagingAborted) and of `Receiver.receive_group` /
`OffsetTracker`, on pure logic only (the table model, classify/emit, the room index and
the drain driven by the model; a Receiver fed by a fake consumer). No Kafka, no Redis.

Tests whose docstring starts with DEFECT showed a defect, fixed since (the last three, an
aborted batch's effects on the table and an ID reused in the room, were strict xfails
until issue 29). The others document properties that held."""

from __future__ import annotations

import contextlib
import random
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from router import contract
from router.receiver import OffsetTracker, ReceiveTimeout
from router.table import room
from router.table.model import TableModel
from router.table.routing import HELD, NO_DEST, STOPPING, RouteRequest
from router.topology.side import side_spec
from router.unit.steps.batch import Batch
from router.unit.steps.classify import Classifier
from router.unit.steps.emit.emitter import Emitter
from tests.fixtures.fakes import FakeMessage, msg
from tests.fixtures.receivers import fake_receiver
from tests.fixtures.roomharness import STRICT, WHOLE, Side, settings, whole


def req(gid: str | None, final: bool = False, lane: str = "q/0", **kw: Any) -> RouteRequest:
    return RouteRequest(gid, final, 60_000, f"{lane}/{gid}/{final}", lane, **kw)


# ============================================= defects, fixed (issue 29: aborted batches)


def test_a_replayed_batch_that_hit_the_bound_publishes_the_staging_aborted_event() -> None:
    """DEFECT, fixed (room.parked_message / route.lua parked_message: the entry remembers
    the position of the message that hit the bound, `Entry.unstaged`). The table's UNSTAGED
    was a one-shot answer, but the event rides in the batch's transaction. Bound 3: W0, W1
    staged and committed; the batch routing W2 gets '!W' (the entry becomes WAITING) and
    aborts (unit killed before the commit, a produce error, a Redis failure on a later
    chunk of the same batch). The table's change survives the abort; the replay of W2
    used to find a WAITING entry and answer plain '!w', so that no GroupStagingAborted
    event was ever committed. Now the replay answers '!W' again: one event, committed."""
    s = Side(["0"], bound=3)
    assert s.route(0, whole(0, "W", 0), whole(1, "W", 1)) == [room.WAIT, room.WAIT]
    assert s.route(10, whole(2, "W", 2), commit=False) == [room.UNSTAGED]
    assert s.aborted_events() == []  # it rode in the aborted transaction
    replay = s.route(20_000, whole(2, "W", 2))
    assert s.model.entries["W"].state != room.STAGED  # W is streamed from now on
    assert replay == [room.UNSTAGED]
    (event,) = s.aborted_events()
    assert (event["guarantee_id"], event["staged_messages"]) == ("W", 3)
    assert s.route(20_010, whole(3, "W", 3)) == [room.WAIT]  # said once


def test_an_aborted_batch_counts_no_park_twice_and_the_group_stays_whole() -> None:
    """DEFECT, fixed (room.park: `entry.parks` is now idempotent per source position,
    `Entry.parked`). Bound 3, a 3-message whole group: the batch with W0, W1 is routed
    (parks 2) and aborts; its replay used to park W0 again: parks 3 >= bound, '!W' on W0,
    with only 2 messages ever in the room, and each abort brought the cut earlier. Now the
    replay counts nothing, the final completes the group and it is written in one
    transaction."""
    s = Side(["0", "1"], bound=3)
    s.route(0, whole(0, "W", 0), whole(1, "W", 1), commit=False)
    replay = s.route(20_000, whole(0, "W", 0), whole(1, "W", 1))
    assert replay == [room.WAIT, room.WAIT], f"parks={s.model.entries['W'].parks}"
    assert s.model.entries["W"].parks == 2
    assert s.route(20_010, whole(2, "W", 2, final=True)) == [room.WAIT]
    for k in range(3):
        s.run_drain(40_000 + k)  # past the aborted batch's park lease
    assert s.transactions == [[b"W0", b"W1", b"W2"]] and s.aborted_events() == []
    assert s.model.entries == {} and s.model.load == {}


def test_an_id_reused_by_a_whole_group_before_the_release_waits_and_is_delivered_whole() -> None:
    """DEFECT, fixed (room.reuses; found probing ID reuse with the bound). W (whole,
    2 messages) is complete and waits (the one destination is busy). The sender reuses W
    for a new whole group V on the same lane before W's release: its first message used to
    meet the WAITING entry, clear the closing mark and be parked as a member of the old
    group, so that V was written in two pieces with nothing saying so. Now V's first
    message is HELD (its lane waits, as for an ID reused on another lane) until W's
    release; then V is staged on its own and written whole."""
    s = Side(["0"], bound=100)
    assert s.route(0, msg(0, "G", seq=0)) == ["0"]  # G holds the only destination
    assert s.route(1, whole(1, "W", 0), whole(2, "W", 1, final=True)) == [room.WAIT] * 2
    v0 = msg(3, "W", seq=0, value=b"V0", extra=WHOLE)  # the ID reused: new group V
    assert s.route(2, v0) == [HELD]
    assert s.model.entries["W"].closing and s.model.entries["W"].parks == 2
    s.route(3, msg(4, "G", seq=1, final=True))  # G ends: W is admitted
    for k in range(3):
        s.run_drain(4 + k)
    assert "W" not in s.model.entries  # W released
    assert s.route(10, v0) == [room.WAIT]  # the unit's retry of the held lane: staged
    s.route(11, msg(5, "W", seq=1, final=True, value=b"V1", extra=WHOLE))
    for k in range(3):
        s.run_drain(12 + k)
    assert [b"V0", b"V1"] in s.transactions, s.transactions
    assert [v for v in s.transactions if v and v[0] == b"W0"] == [[b"W0", b"W1"]]
    assert s.aborted_events() == [] and s.model.entries == {}


def test_a_reused_id_held_past_the_hold_timeout_joins_the_old_group_and_says_so() -> None:
    """DEFECT, fixed (review of the above: room.reuses answered HELD even past the hold
    timeout). W waits for the destination G holds, and G's final is behind the reused
    W0' on the same partition: the hold must end (force_share), or the partition would
    stop for good under the default wait time-out policy (report). Forced, W0' joins W
    and answers UNSTAGED: the split is said by a GroupStagingAborted event."""
    s = Side(["0"])
    assert s.route(0, msg(0, "G", seq=0)) == ["0"]
    assert s.route(1, whole(1, "W", 0), whole(2, "W", 1, final=True)) == [room.WAIT] * 2
    assert s.route(2, msg(3, "W", seq=0, value=b"V0", extra=WHOLE)) == [HELD]
    forced = RouteRequest("W", False, 60_000, "in/0/3", "in/0", force_share=True, complete=True)
    g1 = RouteRequest("G", True, 60_000, "in/0/4", "in/0")
    assert s.model.route([forced, g1], 999_999).decisions == [room.UNSTAGED, "0"]


def test_a_streamed_reuse_in_an_aborted_batch_never_splits_the_whole_group() -> None:
    """DEFECT, fixed (review: a streamed first message reusing the ID of a complete whole
    group in the room cleared its closing mark, even in a batch that aborted, and the drain
    then wrote W0 alone). The reuse is now HELD until W's release: W is written whole."""
    s = Side(["0"])
    assert s.route(0, whole(0, "W", 0)) == [room.WAIT]
    v0 = msg(2, "W", seq=0, value=b"V0")
    assert s.route(10, whole(1, "W", 1, final=True), v0, commit=False) == [room.WAIT, HELD]
    for k in range(3):
        s.run_drain(20 + k)
    assert s.route(30_000, whole(1, "W", 1, final=True), v0) == [room.WAIT, HELD]
    for k in range(4):
        s.run_drain(30_010 + k)
    assert [b"W0", b"W1"] in s.transactions, s.transactions
    assert s.route(30_100, v0) == ["0"]  # the retry after W's release: a new group
    assert s.aborted_events() == []


def test_a_whole_group_reusing_an_open_groups_id_waits_for_its_release() -> None:
    """DEFECT, fixed (review: a whole group whose first message met an open entry with its
    final routed went straight there and was streamed). HELD until G's release, then
    staged and written whole."""
    s = Side(["0"])
    assert s.route(0, msg(0, "G", seq=0)) == ["0"]
    v0 = msg(2, "G", seq=0, value=b"V0", extra=WHOLE)
    assert s.route(10, msg(1, "G", seq=1, final=True), v0) == ["0", HELD]
    assert s.route(20, v0) == [room.WAIT]  # released with the batch's commit: staged
    s.route(30, msg(3, "G", seq=1, final=True, value=b"V1", extra=WHOLE))
    for k in range(3):
        s.run_drain(40 + k)
    assert [b"V0", b"V1"] in s.transactions, s.transactions
    assert s.aborted_events() == []


def test_receive_group_with_a_zero_timeout_never_polls() -> None:
    """DEFECT, fixed (receiver.py receive_group: `if now >= deadline: raise` came before the
    first poll). `receive(0)` polls once; `receive_group(0)` computes deadline = now and
    raises ReceiveTimeout without ever polling, so a caller that checks without blocking
    (an event loop calling receive_group(0) between other work) never receives anything,
    even with a whole group waiting in the consumer."""
    r = fake_receiver([rmsg(0, "W", 0), rmsg(1, "W", 1, final=True)])
    try:
        group = r.receive_group(0)
    except ReceiveTimeout:
        pytest.fail(f"receive_group(0) polled {r._consumer.polls} times and timed out")
    assert group.values == [b"W0", b"W1"]


def test_receive_group_labels_the_tail_of_a_split_group_complete() -> None:
    """DEFECT, fixed (low; receiver.py receive_group). A group with a gap longer than
    incomplete_after (now likely: a group over max_staged_messages is streamed, so its
    members reach the receive queue as the sender produces them) is returned in two
    pieces: the head with complete=False, then the tail, which starts at seq 2, with
    complete=True. The docstring promises "the next whole group (its members in order, up
    to its final)"; an application trusting `complete` processes the tail as a whole
    group. The receiver has the sequence numbers and could say it is not."""
    r = fake_receiver([rmsg(0, "W", 0), rmsg(1, "W", 1)])
    head = r.receive_group(2, incomplete_after=0.05)  # no new member for 0.05 s
    assert (head.values, head.complete) == ([b"W0", b"W1"], False)
    r._consumer.feed.append(rmsg(2, "W", 2, final=True))  # type: ignore[attr-defined]
    tail = r.receive_group(1, incomplete_after=60.0)
    assert tail.values == [b"W2"]
    assert not tail.complete, "a tail starting at seq 2 is returned as a complete group"


def test_staged_members_are_held_in_the_units_memory_not_only_in_the_room_topic() -> None:
    """Found by review: docs/explanation/routing.md said staged members wait in the room topic "not
    in memory"; the drain's index holds every parked record it reads, payload included,
    until drained. The docs now say so (memory per room partition, bounded per group by
    max_staged_messages, not in total); this test states the fact."""
    s = Side(["0"], bound=10_000)
    s.route(0, msg(0, "G", seq=0))
    s.route(1, *(whole(1 + k, "W", k) for k in range(50)))
    s.run_drain(2)
    held = sum(len(v) for by in s.drain.index.groups.values() for v in by.values())
    assert s.model.entries["W"].state == room.STAGED
    assert held == 50


# ================================================================ held properties


def test_a_final_exactly_at_the_bound_completes_the_group_whole() -> None:
    """Held: bound 3, the final is the 3rd parked message: it completes the group (state
    WAITING before the bound check), '!w', no event, written in one drain transaction."""
    s = Side(["0"], bound=3)
    d = s.route(0, whole(0, "W", 0), whole(1, "W", 1), whole(2, "W", 2, final=True))
    assert d == [room.WAIT] * 3
    s.run_drain(1)
    assert s.transactions == [[b"W0", b"W1", b"W2"]] and s.aborted_events() == []
    assert s.model.entries == {} and s.model.load == {}


def test_the_bound_hit_in_the_batch_of_the_first_message_is_said_once() -> None:
    """Held: bound 2, one batch W0 W1 W2 W3: '!w', '!W', '!w', '!w'; exactly one event
    (the 2nd message's position); W is in the FIFO from then; delivered in order, and the
    final releases everything."""
    s = Side(["0"], bound=2)
    d = s.route(0, *(whole(k, "W", k) for k in range(4)))
    assert d == [room.WAIT, room.UNSTAGED, room.WAIT, room.WAIT]
    (ev,) = s.aborted_events()
    assert (ev["guarantee_id"], ev["source_offset"], ev["staged_messages"]) == ("W", 1, 2)
    for k in range(3):
        s.run_drain(1 + k)
    s.route(10, whole(4, "W", 4, final=True))
    for k in range(3):
        s.run_drain(11 + k)
    assert [v for _, v in s.delivered] == [b"W0", b"W1", b"W2", b"W3", b"W4"]
    assert s.model.entries == {} and s.model.load == {} and s.model.room == {}


def test_a_bound_of_one_streams_at_the_first_message_and_a_group_of_one_stays_whole() -> None:
    """Held: bound 1: a non-final first message answers '!W' (waiting, in the FIFO); a
    one-message group answers '!w' (complete already), no event."""
    t = TableModel(["a"], policy="wait", max_staged=1)
    assert t.route([req("x", complete=True)], 0).decisions == [room.UNSTAGED]
    assert t.entries["x"].state in (room.WAITING, room.ADMITTED)
    assert t.route([req("y", final=True, lane="q/1", complete=True)], 1).decisions == [room.WAIT]


def test_a_bad_message_at_the_bound_is_announced_parked_and_dead_lettered_in_place() -> None:
    """Held: bound 2, W1 has a bad TTL (dead-letter policy): '!W', its room record carries
    the bad mark, one event names W; the drain dead-letters W1 in its place and forwards
    W0, W2, W3 in order."""
    s = Side(["0"], bound=2)
    bad = whole(1, "W", 1, extra=[(contract.TTL_MS, b"1")])
    assert s.route(0, whole(0, "W", 0), bad) == [room.WAIT, room.UNSTAGED]
    assert [e["guarantee_id"] for e in s.aborted_events()] == ["W"]
    s.route(1, whole(2, "W", 2), whole(3, "W", 3, final=True))
    for k in range(4):
        s.run_drain(2 + k)
    assert [v for _, v in s.delivered] == [b"W0", b"W2", b"W3"]
    assert [r for _, r in s.dead] == [b"bad-ttl"]
    assert s.model.entries == {} and s.model.load == {}


def test_a_poison_stop_after_unstaging_dead_letters_everything_and_frees_all() -> None:
    """Held: bound 2, W unstaged (waiting), then a stop-group poison message: '!P!', the
    group leaves the FIFO, its parked and later members are dead-lettered in order,
    nothing delivered, no destination held, no close marker."""
    s = Side(["0"], bound=2)
    s.route(0, msg(0, "G", seq=0))  # the destination is busy: W stays waiting
    s.route(1, whole(1, "W", 0, extra=STRICT), whole(2, "W", 1, extra=STRICT))
    assert s.model.room.keys() == {"W"}
    poison = msg(3, "W", extra=[*WHOLE, *STRICT, (contract.SEQ, b"x")])
    d = s.route(2, poison, whole(4, "W", 3, final=True, extra=STRICT))
    assert d == [STOPPING + NO_DEST, "!p"] and "W" not in s.model.room
    s.route(3, msg(5, "G", seq=1, final=True))
    for k in range(3):
        s.run_drain(4 + k)
    assert [v for _, v in s.delivered] == [b"payload", b"payload"]  # G only
    assert [r for _, r in s.dead] == [b"bad-seq"] + [b"group-stopped"] * 3
    assert s.model.load == {} and s.model.room == {}


def test_an_unstaged_group_is_never_interleaved_on_its_destination() -> None:
    """Held: bound 2, W unstaged while G holds the only destination; ordinary messages
    and another group arrive meanwhile; W is admitted first (FIFO), streamed, and
    nothing lands inside W's span."""
    s = Side(["0"], bound=2)
    s.route(0, msg(0, "G", seq=0))
    s.route(1, whole(1, "W", 0), whole(2, "W", 1))  # unstaged: waits from t=1
    s.route(2, msg(3), msg(4, "H", seq=0, partition=1))
    s.route(3, msg(5, "G", seq=1, final=True))
    t = 4
    for off, final in ((6, False), (7, True)):
        for _ in range(3):
            s.run_drain(t)
            t += 1
        s.route(t, whole(off, "W", off - 4, final=final))
    for _ in range(8):
        s.run_drain(t)
        t += 1
    s.route(t, msg(8, "H", seq=1, final=True, partition=1))
    for _ in range(4):
        s.run_drain(t)
        t += 1
    vals = [v for _, v in s.delivered]
    w = [i for i, v in enumerate(vals) if v and v.startswith(b"W")]
    assert [vals[i] for i in w] == [b"W0", b"W1", b"W2", b"W3"]
    assert w == list(range(w[0], w[0] + 4)), f"interleaved: {vals}"


def test_unstaged_is_answered_only_for_a_staged_entry_and_once_per_staging() -> None:
    """Held (random histories on the model): '!W' only for a message of a group that was
    STAGED before it (or new, with bound 1), never for an admitted/open/waiting entry nor
    an ordinary message, at most once per staging, and the entry is never STAGED after."""
    rng = random.Random(7)
    for trial in range(300):
        bound = rng.choice([1, 2, 3, 5])
        t = TableModel(["a", "b"], policy="wait", max_staged=bound)
        seq: dict[str, int] = {}
        now = 0
        for b in range(25):
            now += rng.choice([1, 10, 20_000])
            reqs = []
            for _ in range(rng.randint(1, 5)):
                g = rng.choice(["W", "X", "Y", None])
                lane = "q/0" if g in ("W", None) else "q/1" if g == "X" else "q/2"
                if g is None:
                    reqs.append(RouteRequest(None, False, 60_000, "", lane))
                    continue
                k = seq.get(g, 0)
                final = rng.random() < 0.2
                poison = rng.random() < 0.03
                reqs.append(
                    req(
                        g,
                        final=final,
                        lane=lane,
                        complete=True,
                        continuation=k > 0,
                        poison_stop=poison,
                    )
                )
                seq[g] = 0 if final else k + 1
            before = {g: (e.state, e.parks) for g, e in t.entries.items()}
            res = t.route(reqs, now, batch=f"b{b}")
            seen: set[str] = set()
            staged_here: set[str] = set()  # staged by an earlier message of this batch
            for r, d in zip(reqs, res.decisions, strict=True):
                gid = r.guarantee_id
                if gid is not None and gid not in before and d == room.WAIT and not r.final:
                    staged_here.add(gid)
                if d != room.UNSTAGED:
                    continue
                assert gid is not None and not r.final, (trial, b, r)
                prev = before.get(gid)
                assert (prev is None and (bound <= 1 or gid in staged_here)) or (
                    prev is not None and prev[0] == room.STAGED
                ), (trial, b, r, prev)
                assert gid not in seen
                seen.add(gid)
                assert t.entries[gid].state != room.STAGED
            if rng.random() < 0.7:
                finals = [
                    (r.guarantee_id, r.token)
                    for r, d in zip(reqs, res.decisions, strict=False)
                    if r.final and d and d[0] != "!"
                ]
                t.settle(f"b{b}", ["a", "b"], finals)
            for e in t.entries.values():
                assert e.state != room.STAGED or e.parks < bound


# ============================================================ receiver (no broker)


def rmsg(
    offset: int,
    gid: str | None,
    seq: int | None = None,
    *,
    final: bool = False,
    partition: int = 0,
    topic: str = "q",
) -> FakeMessage:
    value = f"{gid}{seq}".encode() if gid else f"o{offset}".encode()
    return msg(offset, gid, seq=seq, final=final, topic=topic, partition=partition, value=value)


def test_groups_and_ordinary_messages_come_back_in_partition_order() -> None:
    """Held: a contiguous whole group, then an ordinary message, then another group: in
    that order; commits follow done()."""
    r = fake_receiver(
        [rmsg(0, "W", 0), rmsg(1, "W", 1, final=True), rmsg(2, None), rmsg(3, "V", 0, final=True)]
    )
    got = [r.receive_group(1) for _ in range(3)]
    assert [g.values for g in got] == [[b"W0", b"W1"], [b"o2"], [b"V0"]]
    for g in got:
        r.done(g)
    assert r._consumer.stored[-1] == ("q", 0, 4)  # type: ignore[attr-defined]


def test_one_id_on_two_partitions_is_two_groups() -> None:
    """Held: the same guarantee ID interleaved on two partitions (two queues, or two
    partitions) is gathered per (topic, partition, ID): two groups, never mixed."""
    r = fake_receiver(
        [
            rmsg(0, "W", 0, partition=0),
            rmsg(0, "W", 0, topic="p"),
            rmsg(1, "W", 1, final=True, topic="p"),
            rmsg(1, "W", 1, final=True, partition=0),
        ]
    )
    a, b = r.receive_group(1), r.receive_group(1)
    assert {(m.topic, m.partition) for m in a.messages} == {("p", 0)}
    assert {(m.topic, m.partition) for m in b.messages} == {("q", 0)}
    assert a.complete and b.complete and len(a.messages) == len(b.messages) == 2


def test_done_twice_and_done_after_revoke_commit_nothing_more() -> None:
    """Held: a second done() of a group stores nothing; done() of a group whose partition
    was revoked meanwhile stores nothing (the next owner re-reads from the commit)."""
    r = fake_receiver(
        [
            rmsg(0, "W", 0),
            rmsg(1, "W", 1, final=True),
            rmsg(0, "V", 0, partition=1),
            rmsg(1, "V", 1, final=True, partition=1),
        ]
    )
    w, v = r.receive_group(1), r.receive_group(1)
    r.done(w)
    stored = list(r._consumer.stored)  # type: ignore[attr-defined]
    r.done(w)
    assert r._consumer.stored == stored and stored[-1] == ("q", 0, 2)  # type: ignore[attr-defined]
    r._forget([TopicPartition("q", 1)])
    r.done(v)
    assert r._consumer.stored == stored  # type: ignore[attr-defined]


def test_an_incomplete_group_is_returned_and_its_partition_commit_waits_for_it() -> None:
    """Held: a group without its final is returned incomplete; an ordinary message after
    it on the same partition comes first, and its done() does not commit past the group."""
    r = fake_receiver([rmsg(0, "W", 0), rmsg(1, None), None])
    o = r.receive_group(1)
    assert o.values == [b"o1"]
    r.done(o)
    assert r._consumer.stored == []  # type: ignore[attr-defined]
    w = r.receive_group(1, incomplete_after=0.0)
    assert (w.values, w.complete) == ([b"W0"], False)
    r.done(w)
    assert r._consumer.stored == [("q", 0, 2)]  # type: ignore[attr-defined]


def test_commits_never_pass_a_message_not_done_in_any_interleaving() -> None:
    """Held (random interleavings of receive_group / done / revoke on 2 partitions, groups
    with gaps for aborted-transaction markers): every stored offset is <= the lowest
    offset received and not done on its partition, and stored offsets never go back
    within one assignment."""
    for seed in range(40):
        rng = random.Random(seed)
        feed: list[FakeMessage | None] = []
        nxt = {0: 0, 1: 0}
        for gi in range(8):
            p = rng.choice([0, 1])
            gid = rng.choice([None, f"G{gi}", "R"])  # R: an ID reused on both partitions
            n = 1 if gid is None else rng.randint(1, 4)
            for k in range(n):
                feed.append(
                    rmsg(
                        nxt[p],
                        gid,
                        k if gid else None,
                        final=gid is not None and k == n - 1 and rng.random() < 0.9,
                        partition=p,
                    )
                )
                nxt[p] += rng.choice([1, 1, 2])  # 2: a transaction marker in between
            if rng.random() < 0.2:
                feed.append(None)
        r = fake_receiver(feed)
        held: list[Any] = []
        last: dict[int, int] = {}
        for _ in range(60):
            act = rng.random()
            if act < 0.5:
                with contextlib.suppress(ReceiveTimeout):
                    held.append(r.receive_group(0.01, incomplete_after=0.0))
            elif act < 0.95 and held:
                g = held.pop(rng.randrange(len(held)))
                before = len(r._consumer.stored)  # type: ignore[attr-defined]
                r.done(g)
                for topic, p, off in r._consumer.stored[before:]:  # type: ignore[attr-defined]
                    pending = r._offsets._open.get((topic, p), {})
                    assert not pending or off <= min(pending), (seed, p, off, pending)
                    assert off >= last.get(p, 0), (seed, p, off, last)
                    last[p] = off
                    not_done = [m.offset for h in held for m in h.messages if m.partition == p]
                    assert all(off <= o for o in not_done), (seed, p, off, not_done)
            elif act >= 0.95:
                p = rng.choice([0, 1])
                r._forget([TopicPartition("q", p)])
                held = [h for h in held if h.messages[0].partition != p]
                last.pop(p, None)


def test_offset_tracker_commit_is_the_lowest_not_done() -> None:
    """Held: finishing out of order never moves the commit past an unfinished offset."""
    t = OffsetTracker()
    tp = ("q", 0)
    for o in (3, 5, 6, 9):
        t.received(tp, o)
    assert t.done(tp, 6) is None and t.done(tp, 9) is None
    assert t.done(tp, 3) == 5
    assert t.done(tp, 3) is None  # twice
    assert t.done(tp, 5) == 10
    t.forget(tp)
    assert t.done(tp, 5) is None


def test_the_emitter_treats_unstaged_like_wait_for_every_decision_path() -> None:
    """Held: the only special-casing of '!w' outside the table is emit.py (the close
    marker branch, finals; a close marker is final, so never '!W'); '!W' parks the item
    in the room like '!w' and adds one event, and nothing else counts it as forwarded."""
    s = settings(2)
    emitter = Emitter(s, side_spec(s, "send"), "u")
    batch = Batch("b", 0)
    Classifier(s, "send", {}).classify(batch, [whole(4, "w", 1)])
    batch.items[0].decision = room.UNSTAGED
    out = emitter.emit(batch, 0)
    assert [r.topic for r in out.records] == [s.topology.room_topic("send"), "t.events"]
    assert out.finals == [] and out.forwarded == 0 and out.consumed == 1
    assert dict(out.records[0].headers)[contract.ROOM] == b"w"
