"""Bad input never stops a unit and is never dropped silently.

Every kind of malformed message goes to the dead-letter topic as an Avro record with the
original bytes, headers, source position and reason; the units keep going; counts
reconcile (consumed = forwarded + dead-lettered). A seeded fuzz run throws random headers
and payloads at real unit processes.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.traffic.final_read import read_to_end
from ops.harness.traffic.workload import encode_event
from router import contract
from router.contract import BadInput, schemas
from router.contract.events import DEAD_LETTER
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique, wait_until

ROUTING_ENV = {
    "ROUTER_ROUTING__TTL_BY_TYPE": '{"order": 60000, "slips": 3600000}',
    "ROUTER_ROUTING__SCHEMA_BY_TYPE": '{"order": "router.demo.OrderEvent"}',
    "ROUTER_KAFKA__MAX_MESSAGE_BYTES": "65536",
    # fuzzed IDs reused on another lane wait for the old (never ending) group this long
    "ROUTER_ROUTING__HOLD_TIMEOUT_MS": "1000",
}
SPEC = PipelineSpec(
    send_units=1,
    receive_units=1,
    sweepers=0,
    transfer_partitions=3,
    receive_queues=3,
    # A bad message of a group is dead-lettered and its group goes on: these groups never
    # end, so they hold their destinations until their TTL. Under the default policy (wait)
    # the good messages would wait for that behind them (as they should); the subject here
    # is what happens to bad input, so the destinations are shared.
    busy_policy="share",
    extra_env=ROUTING_ENV,
)


def arrived(bootstrap: str, topics: list[str], expected: int) -> None:
    """Until at least `expected` committed records are on `topics` (bounded)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("wait"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(t, 0, 0) for t in topics])
    count = 0

    def enough() -> bool:
        nonlocal count
        count += sum(1 for m in consumer.consume(500, 0.2) if m.error() is None)
        return count >= expected

    try:
        wait_until(enough, 90, f"{expected} records on {topics}")
    finally:
        consumer.close()


def stop_and_reconcile(p: Pipeline) -> dict[str, int]:
    """Stop the units (each finishes and commits its batch, exit code 0) and check their
    counts add up. After this, nothing more can arrive anywhere."""
    p.stop()
    assert all(code == 0 for code in p.exit_codes.values()), p.exit_codes
    metrics = p.unit_metrics()["send-unit"]
    consumed = metrics["messages_in"]
    assert consumed == metrics["messages_out"] + metrics.get("dead_letters", 0) + metrics.get(
        "parked", 0
    )
    return metrics


def everything(p: Pipeline, topics: list[str]) -> list[Any]:
    """What `topics` hold, read to their end offsets (read_committed), once the units
    stopped: the whole of it, so anything extra shows."""
    assert p.exit_codes, "stop the units first"
    held = read_to_end(p.settings.kafka, {t: TopicPartition(t, 0) for t in topics})
    return [m for t in topics for m in held[t]]


def dead_letters(p: Pipeline) -> dict[bytes, dict[str, Any]]:
    records = everything(p, [p.settings.topology.dead_letter_topic])
    dead = {m.key(): schemas.decode(DEAD_LETTER, m.value()) for m in records}
    assert len(dead) == len(records), "a message dead-lettered twice"
    return dead


def test_every_kind_of_bad_input_is_dead_lettered_with_its_reason(
    pipeline: PipelineFactory,
) -> None:
    p = pipeline(SPEC)
    s = p.settings
    queue = s.topology.send_queues[0]
    good_order = encode_event("e1", "s", "g-ok", 0, True, random.Random(1), 100)
    cases: list[tuple[bytes, list[tuple[str, bytes]], bytes, str]] = [
        (b"bad-utf8", [("guarantee-id", b"\xff\xfe")], b"v", "bad-guarantee-id"),
        (b"too-long", [("guarantee-id", b"g" * 300)], b"v", "bad-guarantee-id"),
        # the waiting room's name for this lane's parked ordinary messages
        (b"reserved", [("guarantee-id", f"~{queue}/0".encode())], b"v", "bad-guarantee-id"),
        (
            b"final",
            [("guarantee-id", b"g1"), ("guarantee-final", b"perhaps")],
            b"v",
            "bad-final-flag",
        ),
        (
            b"type",
            [("guarantee-id", b"g2"), ("message-type", b"invoice")],
            b"v",
            "unknown-message-type",
        ),
        (
            b"ttl",
            [("guarantee-id", b"g3"), ("guarantee-ttl-ms", b"99999999999999")],
            b"v",
            "bad-ttl",
        ),
        (b"big", [("guarantee-id", b"g4")], b"x" * 100_000, "oversized"),
        (
            b"avro",
            [("guarantee-id", b"g5"), ("message-type", b"order")],
            b"\x01garbage",
            "undecodable-payload",
        ),
        (b"orphan-final", [("guarantee-final", b"true")], b"v", "final-without-guarantee-id"),
    ]
    producer = Producer(
        {"bootstrap.servers": s.kafka.bootstrap_servers, "message.max.bytes": 200_000}
    )
    for key, headers, value, _ in cases:
        producer.produce(queue, value, key, partition=0, headers=headers)
    producer.produce(
        queue,
        good_order,
        b"good",
        partition=0,
        headers=[
            ("guarantee-id", b"g-ok"),
            ("message-type", b"order"),
            ("guarantee-final", b"true"),
        ],
    )
    producer.flush(10)
    expected_dead = len(cases)
    kcat = shutil.which("kcat")
    if kcat:  # a header *name* that is not UTF-8 (no Python client can produce one)
        subprocess.run(
            [
                kcat.encode(),
                b"-P",
                b"-b",
                s.kafka.bootstrap_servers.encode(),
                b"-t",
                queue.encode(),
                b"-p",
                b"0",
                b"-k",
                b"bad-header-name",
                b"-H",
                b"\xff\xfe=v",
            ],
            input=b"value",
            check=True,
        )
        expected_dead += 1

    arrived(s.kafka.bootstrap_servers, s.topology.receive_queues, 1)
    arrived(s.kafka.bootstrap_servers, [s.topology.dead_letter_topic], expected_dead)
    metrics = stop_and_reconcile(p)
    assert metrics["dead_letters"] == expected_dead and metrics["messages_out"] == 1
    assert [m.key() for m in everything(p, s.topology.receive_queues)] == [b"good"]
    dead = dead_letters(p)
    assert len(dead) == expected_dead
    for key, headers, value, code in cases:
        record = dead[key]
        assert record["reason_code"] == code, (key, record["reason"])
        assert record["source_topic"] == queue and record["source_partition"] == 0
        assert record["value_size"] == len(value)
        if code == "oversized":
            assert record["value_truncated_to"] is not None
        else:
            assert record["value"] == value
            assert [(h["key"], h["value"]) for h in record["headers"]] == headers
    if kcat:
        assert dead[b"bad-header-name"]["reason_code"] == "bad-headers"
        assert dead[b"bad-header-name"]["value"] == b"value"


HEADER_NAMES = [*sorted(contract.ROUTING_HEADERS), "x-trace", "guarantee-id "]


def fuzz_value(rng: random.Random) -> bytes | None:
    return rng.choice(
        [
            None,
            b"",
            b"true",
            b"false",
            b"1",
            str(rng.randint(-5, 10**12)).encode(),
            "grüße".encode(),
            bytes(rng.randrange(256) for _ in range(rng.randint(1, 40))),
            b"order",
            b"slips",
            b"stop-group",
            b"dead-letter",
            f"g{rng.randint(0, 5)}".encode(),
        ]
    )


def test_fuzzed_headers_and_payloads_never_stop_a_unit(pipeline: PipelineFactory) -> None:
    p = pipeline(SPEC)
    s = p.settings
    rng = random.Random(20261121)
    producer = Producer({"bootstrap.servers": s.kafka.bootstrap_servers})
    n = 400
    predicted_bad: dict[bytes, str] = {}
    for i in range(n):
        key = f"fuzz-{i}".encode()
        headers = [(rng.choice(HEADER_NAMES), fuzz_value(rng)) for _ in range(rng.randint(0, 5))]
        payload = rng.choice(
            [
                None,
                b"",
                bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))),
                encode_event(f"e{i}", "s", None, 0, False, rng, 50),
            ]
        )
        producer.produce(
            s.topology.send_queues[i % 2], payload, key, partition=i % 3, headers=headers
        )
        try:
            r = contract.parse(headers, s.routing)
            if r.message_type == "order":
                schemas.validate("router.demo.OrderEvent", payload or b"")
        except BadInput as bad:
            predicted_bad[key] = bad.code
        except ValueError:
            predicted_bad[key] = "undecodable-payload"
    producer.flush(10)

    def all_accounted() -> bool:
        m = p.unit_metrics().get("send-unit", {})
        return m.get("messages_in", 0) >= n

    wait_until(all_accounted, 120, "the send unit to handle every fuzzed message")
    # Each message ends up once, on a receive queue or the dead-letter topic.
    arrived(
        s.kafka.bootstrap_servers, [*s.topology.receive_queues, s.topology.dead_letter_topic], n
    )
    metrics = stop_and_reconcile(p)
    assert metrics["messages_in"] == n
    dead = dead_letters(p)
    dead_keys = set(dead)
    # Everything predicted bad is dead-lettered with the predicted reason ...
    for key, code in predicted_bad.items():
        assert key in dead_keys, key
        assert dead[key]["reason_code"] == code, (key, dead[key]["reason"])
    # ... and the rest is dead-lettered only to keep a group whole (orphans, stopped
    # groups, and fuzzed IDs that turn up on several partitions).
    keep_whole = ("group-entry-missing", "group-stopped", "group-spans-partitions")
    for key in dead_keys - set(predicted_bad):
        assert dead[key]["reason_code"] in keep_whole, dead[key]
    forwarded = everything(p, s.topology.receive_queues)
    assert len(forwarded) == n - len(dead)  # each exactly once
    assert {m.key() for m in forwarded} | dead_keys == {f"fuzz-{i}".encode() for i in range(n)}
    assert not {m.key() for m in forwarded} & dead_keys
