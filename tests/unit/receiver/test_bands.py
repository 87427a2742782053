"""Review findings on the Receiver's priority bands (router/receiver/bands.py), each fixed:
a band resume undid a failure pause (records lost), an abandoned final let another band
in (interleaved), revoking one band partition ended the hold of a band kept, and a held
queue's unreadable backlog starved other queues. Pure logic: in-memory consumers."""

from __future__ import annotations

from typing import Any

from router.receiver.bands import ReceiverBands
from router.receiver.received import Received
from tests.fixtures.bands import FakeConsumer, FakeEnds, received
from tests.fixtures.fakes import msg
from tests.fixtures.receivers import banded_receiver, rec


def hi(offset: int) -> Any:
    return msg(offset, None, topic="q.p2", value=f"h{offset}".encode())


def test_a_band_resume_never_undoes_a_failure_pause() -> None:
    """q@1's check fails (Redis away): Redeliveries rewinds q and pauses it. A band-2
    record then pauses q for the bands too; once band 2 is drained the bands resumed q
    while Redeliveries still held it, and the records it refused were skipped: q@1 was
    never handed out, yet later offsets were committed."""
    r = banded_receiver(
        {("q", 0): [rec("q", 0, None), rec("q", 1, None), rec("q", 2, None)], ("q.p2", 0): []}
    )
    c = r._consumer
    judge = r._redo._judge
    failed: list[int] = []

    def flaky(tp: Any, m: Received) -> bool:
        if m.topic == "q" and m.offset == 1 and not failed:
            failed.append(1)
            raise ConnectionError("Redis away")
        return bool(judge(tp, m))

    r._redo._judge = flaky
    got = []
    m = r.poll(0)
    assert m is not None
    got.append(m.value)
    r.done(m)  # q@0
    assert r.poll(0) is None  # q@1 fails: held (paused, read again after the pause)
    assert ("q", 0) in r._redo._held and ("q", 0) in c.paused
    c.logs[("q.p2", 0)].append(hi(0))  # a high-priority record
    while (m := r.poll(0)) is not None:  # band 2 read, then drained
        got.append(m.value)
        r.done(m)
    r._redo._held = {tp: (0.0, at) for tp, (_, at) in r._redo._held.items()}  # pause over
    c.logs[("q", 0)].append(rec("q", 3, None))
    while (m := r.poll(0)) is not None:
        got.append(m.value)
        r.done(m)
    assert got == [b"o0", b"h0", b"o1", b"o2", b"o3"], got


def test_an_abandoned_final_keeps_the_other_bands_out() -> None:
    """One fetch holds [g0, g1 (final), band 2] and [o0, band 0]: the hold ended when g1
    was handed out, so o0 was admitted; the application abandoned g1 and processed o0
    before g1 came again, inside the group. The hold now ends when the final is done."""
    r = banded_receiver({("q.p2", 0): [], ("q", 0): []})
    r._consumer.arrivals = [
        rec("q.p2", 0, "g", 0),
        rec("q.p2", 1, "g", 1, final=True),
        rec("q", 0, None),
    ]
    processed = []
    abandoned = False
    for _ in range(5):
        failed: set[tuple[str, int]] = set()
        for m in r.consume(10, 0):
            if (m.topic, m.partition) in failed:
                continue  # docs/explanation/receiver.md's loop
            if m.final and not abandoned:
                abandoned = True
                r.abandon(m)
                failed.add((m.topic, m.partition))
                continue
            processed.append(m.value)
            r.done(m)
    assert processed.index(b"g1") < processed.index(b"o0"), processed


def test_a_held_queues_unreadable_backlog_does_not_starve_other_queues() -> None:
    c = FakeConsumer(
        {("q", 0): (1, 1), ("q.p2", 0): (0, 50), ("r", 0): (0, 1000), ("r.p2", 0): (0, 0)}
    )
    bands = ReceiverBands(c, ["q", "r"], 3, ends=FakeEnds(c))
    assert bands.admit(received("q", 0, "g"))  # q's group opens in band 0: q.p2 must wait
    readable = 0
    for _ in range(22):
        bands.before_poll()
        readable += ("r", 0) not in bands.paused
    assert readable > 11, f"r's band 0 readable in {readable} of 22 batches"


def test_revoking_one_band_partition_keeps_the_hold_of_a_band_kept() -> None:
    c = FakeConsumer({("q", 0): (4, 5), ("q.p1", 0): (0, 0), ("q.p2", 0): (1, 3)})
    bands = ReceiverBands(c, ["q"], 3, ends=FakeEnds(c))
    assert bands.admit(received("q.p2", 0, "g"))  # g handed out part way in band 2
    bands.forget(("q.p1", 0))  # an incremental assignor revokes q.p1 alone
    assert not bands.admit(received("q", 4)), "q@4 handed out inside g"
    bands.forget(("q.p2", 0))  # g's own band went: its hold goes with it
    assert bands.open == {}


def test_the_first_turn_asks_every_partition_in_one_request() -> None:
    """Never fetched yet, every band partition's end is asked before the first turn, in
    one request on the bands' own connection (`router.backends.kafka.endoffsets`), not
    one partition after another through the consumer (each waiting behind its fetch)."""
    c = FakeConsumer({("q", 0): (0, 10), ("q.p1", 0): (0, 0), ("q.p2", 0): (0, 3)})
    ends = FakeEnds(c)
    bands = ReceiverBands(c, ["q"], 3, ends=ends)
    bands.before_poll()
    assert ends.asked == [[("q", 0), ("q.p1", 0), ("q.p2", 0)]]
    assert c.calls == [("pause", ["q", "q.p1"])]  # band 2 first
