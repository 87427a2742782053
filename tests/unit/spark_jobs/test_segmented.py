"""The Spark receiver's pure checks with segments, lifetimes and multicast (no Spark):
`spark_jobs.segmented` and `spark_jobs.groups` against `router.contract.segments`' contract."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from router.contract import segments
from spark_jobs.groups import (
    DUPLICATE,
    EXPIRED,
    GROUP,
    RECORD,
    VIOLATION,
    Message,
    Outcome,
    Seg,
    State,
    ordinary,
    step,
)


def plain(rid: str, seq: int, *, final: bool = False, offset: int | None = None) -> Message:
    return Message(rid, "s", "q1", 0, seq if offset is None else offset, seq, final, 1_000, b"x")


def pieces(
    payload: bytes, size: int, set_id: str, *, first_seq: int = 0, final: bool = True
) -> list[Message]:
    """`payload` in segments as `router.contract.segments.plan` cuts it, one member each."""
    n = segments.count(len(payload), size)
    digest = hashlib.sha256(payload).hexdigest()
    out = []
    for i, (start, end) in enumerate(segments.pieces(len(payload), size)):
        last = i == n - 1
        seg = Seg(set_id, i, last, len(payload) if last else None, digest if last else None)
        seq = first_seq + i
        out.append(
            Message(
                f"{set_id}#{i}",
                "s",
                "q1",
                0,
                seq,
                seq,
                final and last,
                1_000,
                payload[start:end],
                segment=seg,
            )
        )
    return out


def kinds(outcomes: list[Outcome]) -> list[tuple[str, str | None]]:
    return [(o.output, o.message.record_id if o.message else None) for o in outcomes]


PAYLOAD = bytes(range(256)) * 10  # 2560 bytes: three segments of 1024


def test_a_segmented_member_is_one_member_reassembled_and_checked() -> None:
    members = [plain("a", 0), *pieces(PAYLOAD, 1024, "seg-1", first_seq=1, final=False)]
    members.append(plain("z", 4, final=True))
    state, out = step("po/1", None, members)
    assert [o.output for o in out] == [GROUP]
    got = out[0].members
    assert [m.record_id for m in got] == ["a", "seg-1", "z"]
    assert [m.seq for m in got] == [0, 1, 4]  # a segmented member's seq: its first segment's
    assert got[1].value == PAYLOAD
    assert got[1].parts == (1, 2, 3)
    assert state.status == "done" and len(state.seen) == 5


def test_a_segmented_ordinary_message_is_a_record_without_a_group() -> None:
    state, out = step("seg-9", None, pieces(PAYLOAD, 1000, "seg-9"))
    assert len(out) == 1 and out[0].output == RECORD and out[0].ordinary
    assert out[0].message is not None and out[0].message.value == PAYLOAD
    # A re-sent copy (same segment ID): each segment a duplicate.
    _, out = step("seg-9", state, pieces(PAYLOAD, 1000, "seg-9"))
    assert {o.output for o in out} == {DUPLICATE}


def test_segments_across_calls_survive_the_stored_state() -> None:
    parts = pieces(PAYLOAD, 1024, "seg-2")
    state, out = step("seg-2", None, parts[:2])
    assert out == []
    state = State.from_stored(*state.stored())
    assert state.members[1].segment == parts[1].segment
    _, out = step("seg-2", state, parts[2:])
    assert out[0].output == RECORD and out[0].message is not None
    assert out[0].message.value == PAYLOAD


def _corrupt(which: str) -> list[Message]:
    parts = pieces(PAYLOAD, 1024, "seg-3")
    last = parts[-1]
    assert last.segment is not None
    if which == "checksum-mismatch":
        parts[1] = replace(parts[1], value=b"?" * 1024)
    elif which == "length-mismatch":
        parts[-1] = replace(last, segment=replace(last.segment, total=9))
    elif which == "segment-missing":  # index 1 never came; the seq numbers still run
        parts = [parts[0], replace(parts[2], seq=1, offset=1, record_id="seg-3#2")]
    elif which == "segment-duplicate":
        dup = replace(parts[0], seq=1, offset=1, record_id="seg-3#0'")
        parts = [parts[0], dup, replace(parts[1], seq=2, offset=2), replace(last, seq=3, offset=3)]
    elif which == "segment-out-of-order":
        a, b = parts[0], parts[1]
        assert a.segment is not None and b.segment is not None
        parts[0] = replace(a, segment=replace(a.segment, index=1))
        parts[1] = replace(b, segment=replace(b.segment, index=0))
    return parts


@pytest.mark.parametrize(
    "reason",
    [
        "checksum-mismatch",
        "length-mismatch",
        "segment-missing",
        "segment-duplicate",
        "segment-out-of-order",
    ],
)
def test_a_broken_segmented_message_is_a_violation_never_data(reason: str) -> None:
    parts = _corrupt(reason)
    members = [plain("a", 0)] + [
        replace(m, seq=m.seq + 1, offset=m.offset + 1, final=False) for m in parts
    ]
    members.append(plain("z", len(members), final=True))
    state, out = step("po/2", None, members)
    assert state.status == "broken"
    assert {o.output for o in out} == {VIOLATION}
    assert len(out) == len(members)  # every record accounted for
    segment_rows = [o for o in out if o.message is not None and o.message.segment is not None]
    assert all(o.reason is not None and o.reason.startswith(reason) for o in segment_rows)
    others = [o for o in out if o not in segment_rows]
    assert all(o.reason is not None and o.reason.startswith("in a broken group") for o in others)


def test_a_segmented_message_interrupted_by_another_member_is_missing_its_end() -> None:
    parts = pieces(PAYLOAD, 1024, "seg-4", final=False)
    members = [parts[0], plain("x", 1, final=True)]
    _, out = step("po/3", None, members)
    assert out[0].reason is not None and "never came (interrupted at q1[0]@1)" in out[0].reason


def _expiring(m: Message, *, group: bool = False) -> Message:
    return replace(m, expired="expired: lifetime ended", expire_group=group)


def test_an_expired_ordinary_message_is_expired() -> None:
    o = ordinary(_expiring(plain("u", 0)))
    assert (o.output, o.reason) == (EXPIRED, "expired: lifetime ended")


def test_an_expired_member_under_skip_leaves_a_gap_and_the_group_goes_on() -> None:
    state, out = step("g", None, [plain("a", 0), _expiring(plain("b", 1))])
    assert kinds(out) == [(EXPIRED, "b")]
    state = State.from_stored(*state.stored())
    _, out = step("g", state, [plain("b", 1), plain("c", 2, final=True)])  # b: a copy
    assert [o.output for o in out] == [DUPLICATE, GROUP]
    assert [m.seq for m in out[1].members] == [0, 2]


def test_an_expired_member_under_expire_group_expires_the_rest() -> None:
    members = [plain("a", 0), _expiring(plain("b", 1), group=True), plain("c", 2)]
    state, out = step("g", None, members)
    assert kinds(out) == [(EXPIRED, "a"), (EXPIRED, "b"), (EXPIRED, "c")]
    assert state.status == "expired"
    _, out = step("g", state, [plain("d", 3, final=True)])
    assert kinds(out) == [(EXPIRED, "d")]


def test_an_expired_segment_expires_its_whole_message() -> None:
    parts = pieces(PAYLOAD, 1024, "seg-5", first_seq=1, final=False)
    members = [plain("a", 0), parts[0], _expiring(parts[1]), parts[2], plain("z", 4, final=True)]
    _, out = step("g", None, members)
    assert [o.output for o in out] == [EXPIRED, EXPIRED, EXPIRED, GROUP]
    assert [m.record_id for m in out[-1].members] == ["a", "z"]
    # An ordinary message's own group: expired as a whole.
    own = pieces(PAYLOAD, 1024, "seg-6")
    state, out = step("seg-6", None, [own[0], _expiring(own[1]), own[2]])
    assert [o.output for o in out] == [EXPIRED, EXPIRED, EXPIRED]
    assert state.status == "expired"


def test_a_whole_group_with_an_expired_member_goes_through_the_state() -> None:
    members = [replace(plain("a", 0), complete=True), _expiring(plain("b", 1, final=True))]
    state, out = step("g", None, members)
    assert [o.output for o in out] == [EXPIRED, GROUP]
    assert state.status == "done"
