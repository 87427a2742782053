"""The Spark receiver's whole-group path (`groups.step`, pure logic): a group sent with
whole-group delivery that one call holds entirely is emitted at once and leaves only its
finished marker in the state; split over calls, it is reassembled with the same outcome."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from spark_jobs.groups import (
    DUPLICATE,
    GROUP,
    VIOLATION,
    Message,
    Outcome,
    Seg,
    State,
    step,
)


def member(
    group: str,
    seq: int,
    size: int,
    *,
    complete: bool = True,
    offset: int | None = None,
    queue: str = "q1",
    record_id: str | None = None,
) -> Message:
    return Message(
        record_id or f"{group}/{seq}",
        "schema",
        queue,
        0,
        100 + seq if offset is None else offset,
        seq,
        seq == size - 1,
        1_000 + seq,
        f"payload {group}/{seq}".encode(),
        complete,
    )


def whole(group: str, size: int, queue: str = "q1") -> list[Message]:
    return [member(group, i, size, queue=queue) for i in range(size)]


def seen(outcomes: list[Outcome]) -> list[tuple[object, ...]]:
    """Outcomes as plain values (a Message's `complete` flag left out)."""
    return [
        (
            o.output,
            o.reason,
            o.message and (o.message.record_id, o.message.offset),
            [(m.record_id, m.offset, m.value) for m in o.members],
        )
        for o in outcomes
    ]


def test_a_whole_group_in_one_call_is_emitted_at_once_and_its_payloads_are_not_kept() -> None:
    messages = whole("po/1", 4)
    random.Random(3).shuffle(messages)  # any order in the call: checked in offset order
    state, out = step("po/1", None, messages)
    assert [o.output for o in out] == [GROUP]
    assert [m.record_id for m in out[0].members] == [f"po/1/{i}" for i in range(4)]
    assert [m.value for m in out[0].members] == [f"payload po/1/{i}".encode() for i in range(4)]
    assert (state.status, state.members, state.seen) == (
        "done",
        [],
        [m.record_id for m in out[0].members],
    )
    meta, rows = state.stored()
    assert rows == [] and "payload" not in meta


@pytest.mark.parametrize("size", [1, 2, 5])
def test_a_whole_group_split_over_calls_is_reassembled_with_the_same_outcome(size: int) -> None:
    expected_state, expected = step("po/1", None, whole("po/1", size))
    messages = whole("po/1", size)
    for cuts in _every_split(size):
        state: State | None = None
        out: list[Outcome] = []
        for part in [messages[a:b] for a, b in itertools.pairwise(cuts)]:
            state, found = step("po/1", state, part)
            out += found
            if state.status == "open":  # an incomplete part waits in the state
                held = state.members and all(m.value for m in state.members)
                assert held, "the part's payloads are held"
                state = State.from_stored(*state.stored())  # as Spark keeps it between calls
        assert seen(out) == seen(expected)
        assert state == expected_state


def _every_split(size: int) -> list[list[int]]:
    """Every way to cut `size` messages into consecutive non-empty calls (as offsets)."""
    splits = []
    for mask in range(2 ** (size - 1)):
        inner = [i + 1 for i in range(size - 1) if mask >> i & 1]
        splits.append([0, *inner, size])
    return splits


def test_a_whole_group_with_a_gap_or_on_two_queues_is_a_violation_as_any_group() -> None:
    gap = [member("po/1", 0, 3), member("po/1", 2, 3)]
    state, out = step("po/1", None, gap)
    assert state.status == "broken" and {o.output for o in out} == {VIOLATION}
    assert out[-1].reason is not None and out[-1].reason.startswith("order")

    two_queues = [member("po/2", 0, 2, queue="q1"), member("po/2", 1, 2, queue="q2")]
    state, out = step("po/2", None, two_queues)
    assert state.status == "broken"
    assert out[-1].reason is not None and out[-1].reason.startswith("split")


def test_a_copy_of_a_whole_group_is_recognised_by_its_finished_marker() -> None:
    state, _ = step("po/1", None, whole("po/1", 3))
    copy = whole("po/1", 3, queue="q9")  # sent again, routed anew
    state, out = step("po/1", state, copy)
    assert [o.output for o in out] == [DUPLICATE] * 3
    # A copy inside the call: not the whole group alone, so checked message by message.
    _, out = step("po/2", None, [*whole("po/2", 2), member("po/2", 1, 2, offset=500)])
    assert [o.output for o in out] == [GROUP, DUPLICATE]


def test_whole_group_delivery_never_changes_a_verdict() -> None:
    """The same messages, marked whole or not, in one call: the same outcomes and state,
    whatever they are (complete, partial, gaps, copies, conflicts, finals too early,
    other queues)."""
    rng = random.Random(11)
    whole_groups = 0
    for _ in range(3_000):
        size = rng.randint(1, 6)
        messages = whole("g", size)[: rng.randint(1, size)]
        if rng.random() < 0.5:
            messages.pop(rng.randrange(len(messages)))
        if messages and rng.random() < 0.3:
            m = rng.choice(messages)
            messages.append(member("g", m.seq, size, offset=300 + m.seq))
        if messages and rng.random() < 0.2:
            m = rng.choice(messages)
            messages.append(member("g", m.seq, size, offset=400, record_id="other"))
        if messages and rng.random() < 0.2:
            m = rng.choice(messages)
            messages.append(member("g", m.seq, size, offset=500, queue="q2"))
        if messages and rng.random() < 0.1:
            messages.append(Message("x", "schema", "q1", 0, 50, 0, True, 1, b"x", True))
        if not messages:
            continue
        rng.shuffle(messages)
        plain = [_marked(m, False) for m in messages]
        marked = [_marked(m, True) for m in messages]
        state_plain, out_plain = step("g", None, plain)
        state_marked, out_marked = step("g", None, marked)
        assert seen(out_marked) == seen(out_plain), messages
        assert state_marked.stored() == state_plain.stored(), messages
        whole_groups += [o.output for o in out_plain] == [GROUP] and len(messages) == size
    assert whole_groups > 100  # the whole-group path was taken often


def _marked(m: Message, complete: bool) -> Message:
    return Message(
        m.record_id,
        m.schema,
        m.queue,
        m.partition,
        m.offset,
        m.seq,
        m.final,
        m.created_ms,
        m.value,
        complete,
    )


def _stored(state: State) -> State:
    """As `group_state.GroupProcessor` keeps it: the value state and the list state."""
    return State.from_stored(*state.stored())


def test_a_group_arriving_member_by_member_is_stored_by_appending_only() -> None:
    """transformWithStateInPandas: each call adds its new members to the list state (the
    earlier ones, payloads included, are never written again); the finished group keeps
    none (the list is cleared); the state loads back equal, with segments."""
    messages = [replace(m, complete=False) for m in whole("po/2", 4)]
    state: State | None = None
    written: list[Message] = []
    for m in messages:
        before = list(state.members) if state is not None else []
        state, _ = step("po/2", state, [m])
        added = state.appended(before)
        if state.status == "open":
            assert added == [m], "only the new member is written"
            written += added
            loaded = _stored(state)
            assert loaded == replace(state, members=written)
            state = loaded
        else:
            assert added is None and state.members == [], "finished: the list is cleared"
    assert state is not None and state.status == "done"
    assert _stored(state) == state
    assert "payload" not in state.meta_json()
    # A segment's headers go with its member.
    seg = replace(messages[0], segment=Seg("doc-1", 2, True, 5000, "ab" * 32))
    assert _stored(State("open", "q1", 0, [seg])).members == [seg]


def test_a_broken_group_or_a_skipped_segment_is_not_an_append() -> None:
    state, _ = step("po/3", None, [member("po/3", 0, 3, complete=False)])
    before = list(state.members)
    broken, out = step("po/3", state, [member("po/3", 2, 3, complete=False)])
    assert broken.status == "broken" and [o.output for o in out] == [VIOLATION, VIOLATION]
    assert broken.appended(before) is None
    # An expired segment takes its message's earlier segments out: the list is rewritten.
    first = replace(member("po/4", 0, 3, complete=False), segment=Seg("d", 0, False))
    state, _ = step("po/4", None, [first])
    before = list(state.members)
    second = replace(
        member("po/4", 1, 3, complete=False), segment=Seg("d", 1, True), expired="expired: x"
    )
    state, _ = step("po/4", state, [second])
    assert state.status == "open" and state.members == [] and state.appended(before) is None
