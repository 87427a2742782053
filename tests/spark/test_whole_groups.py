"""`api.complete_groups` on groups the router wrote whole: each in one Kafka transaction,
contiguous on one receive queue (as its drain step writes a `guarantee-delivery:
complete` group), among streamed groups and ordinary messages.

Read without `maxOffsetsPerTrigger` (a micro-batch ends between transactions) and with a
small one (micro-batches end inside them): the same outcomes; and in the first run the
state never held a payload of a whole group, read from the checkpoint's state store
after each micro-batch (Spark's `statestore` data source, the `members` list state)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from router import contract
from spark_jobs import api, groups
from spark_jobs.session import kafka_options
from tests.fixtures.factories import TopicFactory
from tests.fixtures.helpers import unique, wait_until

pytestmark = pytest.mark.spark

WHOLE_1 = {"W0": (3, 0), "W1": (1, 1), "W2": (4, 0), "W3": (2, 1)}  # group: (size, partition)
WHOLE_2 = {"W4": (5, 1), "W5": (3, 0)}


class Router:
    """Writes a receive queue as the router does: a whole group in one transaction, a
    streamed group's members as they come (one transaction each here)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": unique("whole-test")}
        )
        self.producer.init_transactions(30)
        self.written = 0

    def _produce(self, gid: str | None, seq: int, size: int, partition: int, **h: Any) -> None:
        body = {"group": gid, "seq": seq}
        headers = contract.headers_for(gid, seq=seq, final=seq == size - 1, **h) if gid else []
        self.producer.produce(
            self.topic, json.dumps(body).encode(), partition=partition, headers=headers
        )
        self.written += 1

    def transaction(self, members: list[tuple[str | None, int, int, int, dict[str, str]]]) -> None:
        self.producer.begin_transaction()
        for gid, seq, size, partition, headers in members:
            self._produce(gid, seq, size, partition, **headers)
        self.producer.commit_transaction(30)

    def whole(self, gid: str, size: int, partition: int, seqs: range | None = None) -> None:
        complete = {"delivery": "complete"}
        self.transaction([(gid, i, size, partition, complete) for i in seqs or range(size)])

    def streamed(self, gid: str, seqs: range, size: int, partition: int) -> None:
        for i in seqs:
            self.transaction([(gid, i, size, partition, {})])

    def ordinary(self, name: str, partition: int) -> None:
        self.producer.begin_transaction()
        self.producer.produce(self.topic, name.encode(), partition=partition)
        self.producer.commit_transaction(30)
        self.written += 1


def _phase_1(w: Router) -> None:
    for gid, (size, partition) in WHOLE_1.items():
        w.whole(gid, size, partition)
    w.streamed("S0", range(2), 3, 0)  # its final comes in phase 2
    w.whole("GAP", 3, 1, seqs=range(0, 3, 2))  # marked whole, seq 1 missing
    w.ordinary("N0", 0)


def _phase_2(w: Router) -> None:
    w.streamed("S0", range(2, 3), 3, 0)
    for gid, (size, partition) in WHOLE_2.items():
        w.whole(gid, size, partition)
    w.whole("W0", 3, 0)  # sent again: copies
    w.ordinary("N1", 1)


EXPECTED_ROWS = 7 + 2 + 3 + 2  # groups, records, duplicates, violations


def _run(
    spark: Any, kafka: dict[str, str], topic: str, checkpoint: Path, w: Router | None, **source: Any
) -> tuple[Counter[tuple[Any, ...]], list[int]]:
    """Outcomes as comparable tuples, and the IDs of the micro-batches. With `w`, the test
    writes phase 2 only once the query has read phase 1."""
    messages = api.read_router_queues(
        spark, [topic], **kafka, groupIdPrefix=unique("whole-reader"), **source
    )
    name = unique("whole_outcomes").replace("-", "_")
    query = (
        api.complete_groups(messages)
        .writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0.5 seconds")
        .start()
    )

    def read() -> int:
        return sum(p["numInputRows"] for p in query.recentProgress)

    try:
        if w is not None:
            phase_1 = w.written
            wait_until(lambda: not query.isActive or read() >= phase_1, 120, "phase 1 read")
            _phase_2(w)
        wait_until(
            lambda: not query.isActive or spark.table(name).count() >= EXPECTED_ROWS,
            180,
            f"{EXPECTED_ROWS} outcomes",
        )
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    outcomes = Counter(
        (
            o.output,
            o.guarantee_id,
            o.record_id,
            o.offset,
            o.reason,
            tuple(o.members_seq or ()),
            tuple(o.members_offset or ()),
        )
        for o in spark.table(name).collect()
    )
    return outcomes, sorted({p["batchId"] for p in query.recentProgress})


def _payloads_held(spark: Any, checkpoint: Path, batches: list[int]) -> dict[str, set[int]]:
    """Per guarantee ID, the micro-batches after which its state held payload bytes: its
    `members` list state (`group_state.GroupProcessor`) held a member."""
    held: dict[str, set[int]] = {}
    for batch in batches:
        state = (
            spark.read.format("statestore")
            .option("batchId", batch)
            .option("stateVarName", "members")
            .load(str(checkpoint))
        )
        for row in state.collect():
            if row.key.guarantee_id is not None and row.list_element.value:
                held.setdefault(row.key.guarantee_id, set()).add(batch)
    return held


def test_whole_groups_skip_the_state_and_give_the_same_outcomes_however_batches_end(
    spark: Any, kafka_bootstrap: str, new_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = new_topic("spark-whole", 2)
    kafka = kafka_options(kafka_bootstrap)
    w = Router(kafka_bootstrap, topic)
    _phase_1(w)

    unsplit, batches = _run(spark, kafka, topic, tmp_path / "unsplit", w)
    read = api.read_router_queues(spark, [topic], streaming=False, **kafka).collect()
    marked = {r.guarantee_id for r in read if r.delivery == "complete"}
    assert marked == {"W0", "W1", "W2", "W3", "W4", "W5", "GAP"}
    assert {r.delivery for r in read if r.guarantee_id not in marked} == {None}
    split, split_batches = _run(
        spark, kafka, topic, tmp_path / "split", None, maxOffsetsPerTrigger=3
    )

    # The outcomes: correct, and the same however the micro-batches ended.
    whole = {**WHOLE_1, **WHOLE_2}
    rows = list(unsplit.elements())
    assert len(rows) == EXPECTED_ROWS
    found = {o[1]: o for o in rows if o[0] == groups.GROUP}
    assert sorted(found) == sorted([*whole, "S0"])
    for gid, (size, _) in whole.items():
        assert found[gid][5] == tuple(range(size))
    offsets = [found[gid][6] for gid in whole]
    assert all(list(o) == list(range(o[0], o[0] + len(o))) for o in offsets)  # contiguous
    assert sum(o[0] == groups.RECORD for o in rows) == 2
    assert {(o[1], o[5]) for o in rows if o[0] == groups.DUPLICATE} == {("W0", ())}
    assert sum(o[0] == groups.DUPLICATE for o in rows) == 3
    violations = [o for o in rows if o[0] == groups.VIOLATION]
    assert {o[1] for o in violations} == {"GAP"} and len(violations) == 2
    assert all("order: seq 2 arrived where seq 1 was due" in o[4] for o in violations)
    assert split == unsplit
    assert len(split_batches) > len(batches)

    # The state: no whole group's payload after any micro-batch of the unsplit run (the
    # streamed group's, open across phases, shows the state store is read); split, the
    # whole groups cut by maxOffsetsPerTrigger were held there until their final.
    held = _payloads_held(spark, tmp_path / "unsplit", batches)
    assert set(held) == {"S0"}
    held_split = _payloads_held(spark, tmp_path / "split", split_batches)
    assert "W4" in held_split and set(held_split) <= {*whole, "S0", "GAP"}
