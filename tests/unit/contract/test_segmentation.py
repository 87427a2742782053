"""Segments of large messages (pure): how `Sender.send` splits a payload
(`router.contract.segments`), what the units accept as segment headers
(`router.unit.steps.classify`), and how the receiver puts segments back together or says what is
wrong (`router.receiver.reassembly`).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router import contract
from router.backends.kafka.brokerwatch import NoBrokerWatch
from router.config import RouterSettings, RoutingSettings
from router.contract import routing_of, segments
from router.contract.request import request, routing_headers
from router.metrics.registry import Metrics
from router.receiver.reassembly import Reassembler, SegmentError
from router.receiver.received import Received
from router.sender.groups import OpenGroups
from router.unit.batching import BatchSizer
from router.unit.source import Source
from router.unit.stalls import StallGuard
from router.unit.steps.batch import Batch
from router.unit.steps.classify import Classifier
from tests.fixtures.fakes import FakeMessage

SIZE = 1024  # segments.MIN_SEGMENT_BYTES: small payloads, many segments
RULES = RoutingSettings()


def records(
    payload: bytes,
    *,
    gid: str | None = None,
    final: bool = False,
    groups: OpenGroups | None = None,
    first_offset: int = 0,
    topic: str = "q",
    set_id: str = "",
) -> list[Received]:
    """The records `Sender.send(payload, guarantee_id=gid, final=final)` produces for a
    segmented payload, as a receiver reads them (consecutive offsets)."""
    r = request([], guarantee_id=gid, final=final, message_type=None, ttl_ms=None, delivery=None)
    digest = hashlib.sha256(payload).hexdigest()
    plan = segments.plan(r, len(payload), digest, SIZE, set_id)
    groups = groups if groups is not None else OpenGroups(300)
    out = []
    for i, part in enumerate(plan.parts):
        _, seq = groups.place(part.request, 0.0, lambda: (topic, 0))
        headers: list[tuple[str, bytes | None]] = [
            *routing_headers(part.request, seq),
            *[(k, v.encode() if isinstance(v, str) else v) for k, v in part.headers],
        ]
        out.append(received(first_offset + i, payload[part.start : part.end], headers, topic))
    return out


def received(
    offset: int, value: bytes | None, headers: list[tuple[str, bytes | None]], topic: str = "q"
) -> Received:
    gid, final, seq = routing_of(headers)
    return Received(topic, 0, offset, None, value, headers, None, gid, final, seq)


def plain(offset: int, value: bytes = b"plain", topic: str = "q") -> Received:
    return received(offset, value, [], topic)


def run(*messages: Received, now: float = 0.0, r: Reassembler | None = None) -> list[Any]:
    """What the reassembler hands out for `messages`: messages and SegmentErrors."""
    r = Reassembler() if r is None else r
    out: list[Any] = []
    for m in messages:
        r.add(m, now)
    while True:
        try:
            x = r.pop()
        except SegmentError as error:
            out.append(error)
            continue
        if x is None:
            return out
        out.append(x)


def replaced(m: Received, **fields: Any) -> Received:
    return Received(**{**{f: getattr(m, f) for f in Received.__slots__}, **fields})  # type: ignore[attr-defined]


def with_header(m: Received, name: str, value: bytes | None) -> Received:
    headers = [(k, v) for k, v in m.headers if k != name]
    if value is not None:
        headers.append((name, value))
    return replaced(m, headers=headers)


# ---------------------------------------------------------------------- splitting


@pytest.mark.parametrize(
    ("total", "count", "last_size"),
    [(0, 1, 0), (1, 1, 1), (SIZE - 1, 1, SIZE - 1), (SIZE, 1, SIZE), (SIZE + 1, 2, 1),
     (2 * SIZE, 2, SIZE), (5 * SIZE + 7, 6, 7)],
)  # fmt: skip
def test_a_payload_is_cut_into_full_segments_and_a_remainder(
    total: int, count: int, last_size: int
) -> None:
    pieces = list(segments.pieces(total, SIZE))
    assert segments.count(total, SIZE) == len(pieces) == count
    assert pieces[0][0] == 0 and pieces[-1][1] == total
    assert all(b - a == SIZE for a, b in pieces[:-1])
    assert pieces[-1][1] - pieces[-1][0] == last_size
    assert all(pieces[i][1] == pieces[i + 1][0] for i in range(len(pieces) - 1))


def test_an_ordinary_message_becomes_a_group_of_its_own_final_on_its_last_segment() -> None:
    payload = os.urandom(3 * SIZE + 5)
    out = records(payload, set_id="seg-1")
    assert len(out) == 4
    assert {m.guarantee_id for m in out} == {"seg-1"}  # guarantee ID = segment ID
    assert [m.seq for m in out] == [0, 1, 2, 3]
    assert [m.final for m in out] == [False, False, False, True]
    last = segments.read(out[-1].headers)
    assert last == segments.Segment(
        "seg-1", 3, True, len(payload), hashlib.sha256(payload).hexdigest()
    )
    assert [segments.read(m.headers).index for m in out] == [0, 1, 2, 3]  # type: ignore[union-attr]
    for m in out:  # every record routes: no dead letter at the units
        assert segments.problem(m.headers, m.guarantee_id, m.final) is None
        contract.parse(m.headers, RULES)


def test_a_segmented_member_takes_several_numbers_and_only_its_last_segment_is_final() -> None:
    groups = OpenGroups(300)
    r = request([], guarantee_id="g", final=False, message_type=None, ttl_ms=None, delivery=None)
    assert groups.place(r, 0.0, lambda: ("q", 0)) == (("q", 0), 0)  # a small first member
    middle = records(os.urandom(2 * SIZE + 1), gid="g", groups=groups)
    tail = records(os.urandom(SIZE + 1), gid="g", final=True, groups=groups)
    assert [m.seq for m in middle] == [1, 2, 3] and [m.seq for m in tail] == [4, 5]
    assert not any(m.final for m in middle)
    assert [m.final for m in tail] == [False, True]  # the final flag: last segment only
    assert "g" not in groups  # the final closed the group


def test_a_callers_own_number_goes_on_the_first_segment_and_the_rest_follow_it() -> None:
    groups = OpenGroups(300)
    r = request(
        [(contract.SEQ, b"0")],
        guarantee_id="g",
        final=False,
        message_type=None,
        ttl_ms=None,
        delivery=None,
    )
    plan = segments.plan(r, 3 * SIZE, "0" * 64, SIZE)
    seqs = [groups.place(p.request, 0.0, lambda: ("q", 0))[1] for p in plan.parts]
    assert seqs == [0, 1, 2]


def test_a_caller_may_not_set_segment_headers_itself() -> None:
    with pytest.raises(ValueError, match="segment-index"):
        request(
            [("segment-index", b"0")],
            guarantee_id=None,
            final=False,
            message_type=None,
            ttl_ms=None,
            delivery=None,
        )


def test_segment_size_must_leave_room_for_headers_under_the_record_limit() -> None:
    segments.check_size(segments.DEFAULT_SEGMENT_BYTES, 1_000_000)  # librdkafka's default
    with pytest.raises(ValueError, match=r"message\.max\.bytes"):
        segments.check_size(1_000_000, 1_000_000)
    with pytest.raises(ValueError, match="below"):
        segments.check_size(100, 1_000_000)
    assert segments.segment_bytes_for(1 << 20) == segments.DEFAULT_SEGMENT_BYTES
    assert segments.segment_bytes_for(256 << 10) == (256 << 10) - segments.HEADER_ROOM


# ---------------------------------------------------------------------- headers at the units

GOOD = [
    (contract.GUARANTEE_ID, b"g"),
    (contract.SEGMENT_ID, b"s"),
    (contract.SEGMENT_INDEX, b"0"),
]
LAST = [
    (contract.SEGMENT_LAST, b"true"),
    (contract.SEGMENT_BYTES, b"10"),
    (contract.SEGMENT_SHA256, b"a" * 64),
]


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ([(contract.SEGMENT_INDEX, b"0")], "without 'segment-id'"),
        ([*GOOD, (contract.SEGMENT_INDEX, b"1")], "more than once"),
        ([(contract.SEGMENT_ID, b""), (contract.SEGMENT_INDEX, b"0")], "1..128 bytes"),
        ([(contract.SEGMENT_ID, b"x" * 129), (contract.SEGMENT_INDEX, b"0")], "1..128 bytes"),
        ([(contract.SEGMENT_ID, b"\xff"), (contract.SEGMENT_INDEX, b"0")], "UTF-8"),
        ([(contract.SEGMENT_ID, b"s")], "segment-index is missing"),
        ([(contract.SEGMENT_ID, b"s"), (contract.SEGMENT_INDEX, b"-1")], "not an integer"),
        ([(contract.SEGMENT_ID, b"s"), (contract.SEGMENT_INDEX, b"1000000")], "not an integer"),
        ([(contract.SEGMENT_ID, b"s"), (contract.SEGMENT_INDEX, b"9" * 40)], "not an integer"),
        ([*GOOD, (contract.SEGMENT_LAST, b"yes")], "not true/false"),
        ([*GOOD, (contract.SEGMENT_LAST, b"true")], "needs segment-bytes"),
        ([*GOOD, (contract.SEGMENT_BYTES, b"5")], "not the last"),
        ([*GOOD, *LAST[:2], (contract.SEGMENT_SHA256, b"ab")], "64 hexadecimal"),
        ([*GOOD, *LAST[:2], (contract.SEGMENT_SHA256, b"g" * 64)], "64 hexadecimal"),
        ([*GOOD[:1], *GOOD[1:], LAST[0], (contract.SEGMENT_BYTES, b"2" * 14), LAST[2]],
         "not an integer"),
    ],
)  # fmt: skip
def test_malformed_segment_headers_are_refused_with_the_reason(
    headers: list[tuple[str, bytes | None]], why: str
) -> None:
    with pytest.raises(segments.BadSegment, match=why):
        segments.read(headers)
    assert why in (segments.problem(headers, "g", False) or "")


@pytest.mark.parametrize(
    ("gid", "final", "headers", "why"),
    [
        (None, False, GOOD[1:], "needs a guarantee-id"),
        ("g", True, GOOD, "not its message's last"),
        ("s", False, [*GOOD, *LAST], "is final"),  # an ordinary message's own group
    ],
)
def test_a_segment_must_fit_its_group(
    gid: str | None, final: bool, headers: list[tuple[str, bytes | None]], why: str
) -> None:
    assert why in (segments.problem(headers, gid, final) or "")


def test_well_formed_segments_and_other_records_are_fine() -> None:
    assert segments.problem([*GOOD], "g", False) is None
    assert segments.problem([*GOOD, *LAST], "g", True) is None  # the group's last message
    assert segments.problem([*GOOD, *LAST], "g", False) is None  # a member, not the last
    assert segments.problem([(contract.SEGMENT_ID, b"s"), (contract.SEGMENT_INDEX, b"0"),
                             *LAST], "s", True) is None  # fmt: skip
    assert segments.problem([(contract.GUARANTEE_ID, b"g")], "g", False) is None
    assert segments.problem(None, None, False) is None


def test_the_units_dead_letter_a_malformed_segment_with_reason_bad_segment() -> None:
    settings = RouterSettings()
    batch = Batch("u:1", 0)
    bad = FakeMessage("in", 0, 0, b"x", None, [*GOOD, (contract.SEGMENT_LAST, b"maybe")])
    stray = FakeMessage("in", 0, 1, b"x", None, GOOD[1:])  # a segment without a group
    fine = FakeMessage("in", 0, 2, b"x", None, list(GOOD))
    for side in ("send", "receive"):
        batch = Batch("u:1", 0)
        Classifier(settings, side, {}).classify(batch, [bad, stray, fine])  # type: ignore[arg-type]
        codes = [i.bad.code if i.bad else None for i in batch.items]
        assert codes == ["bad-segment", "bad-segment", None], side
        assert batch.items[0].bad is not None and batch.items[0].bad.guarantee_id == "g"
        assert "not true/false" in batch.items[0].bad.detail


# ---------------------------------------------------------------------- reassembly


@pytest.mark.parametrize("size", [SIZE + 1, 2 * SIZE, 2 * SIZE + 1, 7 * SIZE + 3])
def test_segments_come_back_as_the_whole_payload_with_every_records_offset(size: int) -> None:
    payload = os.urandom(size)
    segs = records(payload, first_offset=10)
    [whole] = run(*segs)
    assert isinstance(whole, Received)
    assert whole.value == payload and type(whole.value) is bytes
    assert whole.parts == tuple(range(10, 10 + len(segs)))
    assert whole.offset == 10 and whole.topic == "q"
    assert (whole.guarantee_id, whole.seq, whole.final) == (None, None, False)  # ordinary


def test_a_segmented_member_keeps_its_group_its_first_number_and_its_last_final() -> None:
    groups = OpenGroups(300)
    a = records(os.urandom(SIZE + 9), gid="g", groups=groups)
    b = records(os.urandom(3 * SIZE), gid="g", final=True, groups=groups, first_offset=2)
    x, y = run(*a, *b)
    assert (x.guarantee_id, x.seq, x.final, x.parts) == ("g", 0, False, (0, 1))
    assert (y.guarantee_id, y.seq, y.final, y.parts) == ("g", 2, True, (2, 3, 4))


def test_plain_messages_pass_through_in_order_beside_segments_of_another_partition() -> None:
    segs = records(os.urandom(3 * SIZE), first_offset=0)
    other = [plain(i, f"p{i}".encode(), topic="other") for i in range(3)]
    out = run(segs[0], other[0], segs[1], other[1], segs[2], other[2])
    assert [m.value for m in out[:2]] == [b"p0", b"p1"]  # not held behind the segments
    assert out[2].parts == (0, 1, 2) and out[3].value == b"p2"  # done at its last


def test_a_corrupt_segment_is_a_checksum_mismatch_never_data() -> None:
    payload = os.urandom(3 * SIZE)
    segs = records(payload)
    value = bytearray(segs[1].value or b"")
    value[5] ^= 1
    segs[1] = replaced(segs[1], value=bytes(value))
    [error] = run(*segs)
    assert isinstance(error, SegmentError) and error.reason == "checksum-mismatch"
    assert [m.offset for m in error.messages] == [0, 1, 2]
    assert all(m.value is None for m in error.messages)  # no payload kept


def test_a_length_that_differs_from_the_last_segments_header_is_a_length_mismatch() -> None:
    segs = records(os.urandom(2 * SIZE))
    segs[1] = with_header(segs[1], contract.SEGMENT_BYTES, str(2 * SIZE + 1).encode())
    [error] = run(*segs)
    assert error.reason == "length-mismatch"


def test_a_missing_segment_is_reported_and_nothing_of_the_message_handed_over() -> None:
    segs = records(os.urandom(4 * SIZE))
    [error] = run(segs[0], segs[1], segs[3])
    assert error.reason == "segment-missing" and "2 of 4" in error.detail
    [error] = run(*segs[1:])  # its first segment
    assert error.reason == "segment-missing" and "0 of 4" in error.detail


def test_a_message_cut_short_by_another_record_is_reported_before_that_record() -> None:
    segs = records(os.urandom(3 * SIZE))
    error, after = run(segs[0], segs[1], plain(2))
    assert error.reason == "segment-missing" and "last segment never came" in error.detail
    assert "interrupted at offset 2" in str(error)
    assert after.value == b"plain"
    nxt = records(os.urandom(2 * SIZE), first_offset=3)
    error, whole = run(segs[0], *nxt)  # another segmented message comes next
    assert error.reason == "segment-missing" and [m.offset for m in error.messages] == [0]
    assert whole.parts == (3, 4)


def test_duplicate_and_reordered_segments_are_errors() -> None:
    segs = records(os.urandom(3 * SIZE))
    [dup] = run(segs[0], segs[1], replaced(segs[1], offset=2), replaced(segs[2], offset=3))
    assert dup.reason == "segment-duplicate" and "segment 1 came twice" in dup.detail
    [swap] = run(segs[0], replaced(segs[2], offset=1), replaced(segs[1], offset=2))
    assert swap.reason == "segment-missing"  # the last came before segment 1
    swapped = records(os.urandom(4 * SIZE))
    a, b, c, d = swapped
    [swap] = run(a, replaced(c, offset=1), replaced(b, offset=2), d)
    assert swap.reason == "segment-out-of-order"


def test_a_set_without_a_new_segment_for_the_timeout_ends_as_missing() -> None:
    r = Reassembler(timeout_s=30)
    segs = records(os.urandom(3 * SIZE))
    r.add(segs[0], 100.0)
    r.add(segs[1], 110.0)
    r.expire(139.0)
    assert r.pop() is None
    r.expire(140.0)
    with pytest.raises(SegmentError, match="no segment for 30 s") as caught:
        r.pop()
    assert caught.value.reason == "segment-missing"


def test_a_message_larger_than_the_limit_is_too_large_and_its_bytes_not_kept() -> None:
    r = Reassembler(max_bytes=2 * SIZE)
    [error] = run(*records(os.urandom(4 * SIZE)), r=r)
    assert error.reason == "too-large"
    [whole] = run(*records(os.urandom(2 * SIZE), first_offset=10), r=r)
    assert len(whole.value) == 2 * SIZE


def test_malformed_segment_headers_at_the_receiver_are_a_bad_segment_error() -> None:
    segs = records(os.urandom(2 * SIZE))
    broken = with_header(segs[1], contract.SEGMENT_SHA256, b"nope")
    first, bad = run(segs[0], broken)
    assert first.reason == "segment-missing" and bad.reason == "bad-segment"
    assert bad.messages[0].offset == 1


def test_an_error_waits_for_the_next_call_when_it_is_not_first() -> None:
    r = Reassembler()
    segs = records(os.urandom(2 * SIZE), first_offset=1)
    r.add(plain(0), 0.0)
    r.add(segs[0], 0.0)
    r.add(plain(2), 0.0)  # interrupts the set
    assert r.pop(errors=False) is not None  # plain 0
    assert r.pop(errors=False) is None  # the error is next: not skipped
    with pytest.raises(SegmentError):
        r.pop()
    assert r.pop() is not None  # plain 2
    assert not r


def test_a_rewound_partition_drops_what_was_gathered_from_it() -> None:
    r = Reassembler()
    segs = records(os.urandom(3 * SIZE), first_offset=5)
    r.add(plain(4), 0.0)
    r.add(segs[0], 0.0)
    r.add(segs[1], 0.0)
    # abandon(plain 4): read again from 4; the partial set is not an error
    for m in [plain(4), *segs]:
        r.add(m, 0.0)
    out = [r.pop(), r.pop(), r.pop(), r.pop()]
    assert [m.offset if m else None for m in out] == [4, 5, None, None]
    # ready messages of a partition made void meanwhile are dropped by `live`
    r.add(plain(9), 0.0)
    assert r.pop(live=lambda m: m.offset != 9) is None


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 4 * SIZE), min_size=1, max_size=6),
    drop=st.integers(0, 30),
)
def test_any_mix_of_messages_is_handed_over_whole_or_reported_never_truncated(
    sizes: list[int], drop: int
) -> None:
    """Ordinary and segmented messages on one partition; maybe one record lost. Every
    message handed over is byte for byte one that was sent; a message that lost a record
    is an error, as is nothing else."""
    sent: list[bytes] = []
    stream: list[Received] = []
    for size in sizes:
        payload = os.urandom(size)
        sent.append(payload)
        if size > SIZE:
            stream += records(payload, first_offset=len(stream))
        else:
            stream.append(plain(len(stream), payload))
    lost = stream.pop(drop) if drop < len(stream) else None
    r = Reassembler(timeout_s=60)
    out = run(*stream, r=r)
    r.expire(60.0)  # a message whose last record was lost ends at the timeout
    out += run(r=r)
    values = [m.value for m in out if isinstance(m, Received)]
    errors = [e for e in out if isinstance(e, SegmentError)]
    assert all(v in sent for v in values)
    if lost is None or not lost.headers:
        assert not errors
        assert len(values) == len(sent) - (lost is not None)
    else:
        assert len(errors) >= 1 and len(values) == len(sent) - 1
        assert {e.reason for e in errors} <= {"segment-missing"}


class _Fetched:
    """A consumer whose prefetch holds `count` records of `size` bytes."""

    def __init__(self, count: int, size: int) -> None:
        self.left, self.value, self.offset = count, b"x" * size, 0  # one value, shared

    def poll(self, timeout: float) -> FakeMessage | None:
        taken = self.consume(1, timeout)
        return taken[0] if taken else None

    def consume(self, num: int, timeout: float) -> list[FakeMessage]:
        n = min(num, self.left)
        self.left -= n
        self.offset += n
        return [FakeMessage("in", 0, self.offset - n + i, self.value) for i in range(n)]


@pytest.mark.parametrize(
    ("size", "expected"),
    [(512 * 1024, 16), (100, 500), (3 * 1024 * 1024, 3), (20 * 1024 * 1024, 1)],
)
def test_a_units_batch_stops_near_max_batch_bytes_whatever_the_record_size(
    size: int, expected: int
) -> None:
    """Segments of 512 KiB: 16 in a batch of at most 8 MiB, never the 500 of batch_size;
    small records: batch_size; a record larger than the bound: alone."""
    source = object.__new__(Source)
    source.consumer = _Fetched(600, size)  # type: ignore[assignment]
    source.sizer, source.max_bytes = BatchSizer(500, 500), 8 * 1024 * 1024
    source.metrics, source.assigned = Metrics(), {("in", 0)}
    source.stalls, source.watch = StallGuard(), NoBrokerWatch(0)
    batch = source.poll(0.1)
    assert len(batch) == expected
    assert sum(len(m.value() or b"") for m in batch) < 8 * 1024 * 1024 + size
