"""Schema Registry payloads against a real registry (Apicurio's Confluent-compatible API,
started by ops/registry.sh on a port of its own): a message type that names a subject
takes registry-framed payloads; the send unit routes a good one and dead-letters, with its
reason, one whose ID is unknown, whose ID belongs to another subject, whose body does not
decode or that is not framed; the registry away, a payload waits (the unit backs off) and
is delivered once the registry is back, never dead-lettered. The router's events are
written registry-framed and decode by their IDs; the Sender and the Receiver use the serde.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from ops.harness.stack.pipeline import PipelineSpec
from ops.harness.traffic.final_read import read_to_end
from router.backends.registry import framing
from router.backends.registry.client import RegistryClient, RegistryError, RegistryUnavailable
from router.backends.registry.serde import Serde
from router.config.registry import RegistrySettings
from router.contract import events, schemas
from router.receiver import Receiver
from router.receiver.received import Received
from router.sender import Sender
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique, wait_until
from tests.fixtures.paths import ROOT

SCRIPT = ROOT / "ops" / "registry.sh"


def order_schema(*extra: dict[str, object]) -> str:
    fields = [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}, *extra]
    return json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": fields})


OTHER = json.dumps({"type": "record", "name": "Refund", "namespace": "shop", "fields": [
    {"name": "amount", "type": "long"}]})  # fmt: skip


@dataclass
class Registry:
    port: int
    state: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/apis/ccompat/v7"

    def run(self, *args: str) -> None:
        env = {"ROUTER_REGISTRY_PORT": str(self.port), "ROUTER_REGISTRY_DIR": str(self.state)}
        subprocess.run([str(SCRIPT), *args], env={**os.environ, **env}, check=True, timeout=180)

    def client(self) -> RegistryClient:
        return RegistryClient(RegistrySettings(url=self.url, timeout_s=2.0))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"Schema Registry (Apicurio, ops/registry.sh) not installable: no {missing}")
    fetch = subprocess.run(
        [str(SCRIPT), "fetch"], check=False, capture_output=True, text=True, timeout=900
    )
    if fetch.returncode != 0:
        pytest.skip(
            "Schema Registry (Apicurio, ops/registry.sh fetch) could not be built: "
            + fetch.stderr.strip()[-500:]
        )
    reg = Registry(_free_port(), tmp_path_factory.mktemp("registry"))
    reg.run("start")
    try:
        yield reg
    finally:
        reg.run("stop")


def test_the_registry_the_script_starts_serves_subjects_and_its_compatibility_rules(
    registry: Registry,
) -> None:
    client = registry.client()
    subject = unique("orders-value")
    first = client.register(subject, order_schema())
    assert subject in client.subjects()
    assert client.latest(subject) == (first, client.schema(first))
    assert client.in_subject(first, subject)
    client.set_compatibility(subject, "BACKWARD")
    with pytest.raises(RegistryError):  # a new required field: old records cannot be read
        client.register(subject, order_schema({"name": "note", "type": "string"}))
    later = client.register(
        subject, order_schema({"name": "note", "type": "string", "default": ""})
    )
    assert later != first and client.latest(subject) == (first, client.schema(first))
    client.refresh()
    assert client.latest(subject)[0] == later
    serde = Serde(client)
    data = serde.encode(subject, {"id": "o-1", "qty": 2, "note": "n"})
    assert framing.schema_id_of(data) == later
    assert serde.decode(data, subject) == {"id": "o-1", "qty": 2, "note": "n"}


def test_framed_payloads_are_checked_against_their_subject_and_wait_out_a_registry_outage(
    registry: Registry, pipeline: PipelineFactory
) -> None:
    client = registry.client()
    subject, other = unique("orders-value"), unique("refunds-value")
    # As a deployment would (units register what is missing themselves, but Apicurio on H2
    # may fail first writes racing each other: they would retry, at the cost of seconds).
    events.use_registry(client)
    events.frame_with({})  # this process writes no events
    good_id = client.register(subject, order_schema())
    other_id = client.register(other, OTHER)
    p = pipeline(
        PipelineSpec(
            send_units=1,
            receive_units=1,
            sweepers=1,  # it registers the event schemas at start too
            transfer_partitions=1,
            receive_queues=1,
            send_queues=1,
            send_queue_partitions=1,
            busy_policy="share",
            extra_env={
                "ROUTER_REGISTRY__URL": registry.url,
                "ROUTER_REGISTRY__TIMEOUT_S": "3.0",
                "ROUTER_REGISTRY__FRAME_EVENTS": "true",
                "ROUTER_ROUTING__TTL_BY_TYPE": '{"order": 60000}',
                "ROUTER_ROUTING__SUBJECT_BY_TYPE": json.dumps({"order": subject}),
            },
        )
    )
    s = p.settings
    serde = Serde(client)
    body = framing.encode(framing.parse(order_schema()), good_id, {"id": "x", "qty": 1})[5:]
    cases = {
        b"good": serde.encode(subject, {"id": "o-1", "qty": 3}),
        b"unknown-id": framing.frame(999_999, body),
        b"other-subject": serde.encode(other, {"amount": 5}),
        b"bad-body": framing.frame(good_id, b"\x06o-"),
        b"unframed": body,
    }
    with Sender.from_settings(s) as sender:
        for key, value in cases.items():
            sender.send(value, key=key, message_type="order")

    queue = s.topology.receive_queues[0]
    dlq = s.topology.dead_letter_topic

    def landed(keys: set[bytes], dead: int) -> bool:
        held = read_to_end(s.kafka, {queue: TopicPartition(queue, 0), dlq: TopicPartition(dlq, 0)})
        return {m.key() for m in held[queue]} >= keys and len(held[dlq]) >= dead

    wait_until(lambda: landed({b"good"}, 4), 60, "the good payload routed, 4 dead-lettered")

    # The registry away: a payload whose ID the unit has not seen waits, is not dead-lettered.
    later_id = client.register(
        subject, order_schema({"name": "note", "type": "string", "default": ""})
    )
    log = next(proc.log_path for proc in p.fleet.procs if proc.role == "send-unit")
    late_value = framing.encode(
        framing.parse(client.schema(later_id)), later_id, {"id": "o-2", "qty": 1, "note": "late"}
    )
    registry.run("stop")
    with Sender.from_settings(s) as sender:
        sender.send(late_value, key=b"late", message_type="order")
    wait_until(
        lambda: "Schema Registry unavailable" in log.read_text(errors="replace"),
        60,
        "the send unit backing off while the registry is away",
    )
    with pytest.raises(RegistryUnavailable):
        registry.client().subjects()
    registry.run("start")

    wait_until(lambda: landed({b"good", b"late"}, 4), 90, "the late payload, once it is back")
    p.stop()
    assert all(code == 0 for code in p.exit_codes.values()), p.exit_codes
    held = read_to_end(s.kafka, {queue: TopicPartition(queue, 0), dlq: TopicPartition(dlq, 0)})

    got: list[Received] = []
    conf = {"bootstrap.servers": s.kafka.bootstrap_servers, "group.id": unique("app")}
    with Receiver(conf, s.topology.name) as receiver:

        def both() -> bool:
            for m in receiver.consume(10, timeout=0.5):
                receiver.done(m)
                got.append(m)
            return len(got) >= 2

        wait_until(both, 30, "the Receiver handing out both payloads")
    assert [m.key for m in got] == [m.key() for m in held[queue]]  # nothing else, in order
    delivered = {m.key: serde.decode(m.value or b"", subject) for m in got}
    assert delivered == {
        b"good": {"id": "o-1", "qty": 3},
        b"late": {"id": "o-2", "qty": 1, "note": "late"},
    }
    dead_ids = {framing.schema_id_of(m.value()) for m in held[dlq]}
    assert len(dead_ids) == 1 and None not in dead_ids, "dead letters are registry-framed"
    assert client.in_subject(dead_ids.pop(), events.DEAD_LETTER)  # record name strategy
    dead = {m.key(): serde.decode(m.value()) for m in held[dlq]}
    assert {k: d["reason_code"] for k, d in dead.items()} == {
        b"unknown-id": "unknown-schema-id",
        b"other-subject": "wrong-subject",
        b"bad-body": "undecodable-payload",
        b"unframed": "unframed-payload",
    }
    assert str(999_999) in dead[b"unknown-id"]["reason"]
    assert (
        subject in dead[b"other-subject"]["reason"]
        and str(other_id) in dead[b"other-subject"]["reason"]
    )
    # any registry-aware reader decodes them; and they are the router's DeadLetter records
    assert schemas.decode(events.DEAD_LETTER, framing.unframe(held[dlq][0].value())[1])
