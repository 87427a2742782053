"""The benchmark driver end to end, and the raw relay it measures against (real Kafka).

Figures are not asserted: speed is reported by `make bench`, never timed in a test. What
is asserted is that the driver measures what it says (every stage moved every message)
and prints what the issue asks for."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from ops.harness.bench import SOURCE_PARTITIONS, Workload, fill
from ops.harness.collect import read_to_end
from ops.harness.pipeline import Pipeline, PipelineSpec
from router import clients
from router.config import RouterSettings
from router.relay import relay_spec
from router.side import side_spec
from router.topics import ensure_topics
from tests.helpers import unique, wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_raw_relay_moves_every_message_once_with_key_and_headers_intact(
    base_settings: RouterSettings, admin: AdminClient, tmp_path: Path
) -> None:
    spec = PipelineSpec(
        send_units=0,
        receive_units=0,
        sweepers=0,
        send_queues=1,
        send_queue_partitions=SOURCE_PARTITIONS,
        transfer_partitions=6,
    )
    p = Pipeline(base_settings, spec, tmp_path, name=unique("relay"))
    seen: list[Message] = []
    try:
        ensure_topics(p.settings, admin)
        source = p.settings.topology.send_queues[0]
        fill(p.settings, source, Workload(200, 0.5, 20), 3_000, seed=5)
        p.fleet.start("send-relay")
        consumer = Consumer(
            {
                **clients.admin_config(p.settings.kafka),
                "group.id": unique("check"),
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([p.settings.topology.transfer_topic])

        def all_seen() -> bool:
            for m in consumer.consume(500, 0.2):
                if m.error() is None:
                    seen.append(m)
            return len(seen) >= 3_000

        wait_until(all_seen, 90, "the relay to forward every message")
        consumer.close()
        assert p.stop() == {"send-relay-1": 0}
        # And nothing more: everything the transfer topic holds, to its end offsets.
        transfer = p.settings.topology.transfer_topic
        held = read_to_end(
            p.settings.kafka, {str(i): TopicPartition(transfer, i) for i in range(6)}
        )
        seen = [m for records in held.values() for m in records]
        group = relay_spec(side_spec(p.settings, "send")).group_id
        assert group != p.settings.topology.send_group  # never the units' own group
    finally:
        p.stop()
        p.cleanup()
    assert len(seen) == 3_000
    headers = [dict(m.headers() or []) for m in seen]
    grouped = [h for h in headers if "guarantee-id" in h]
    assert 1_200 < len(grouped) < 1_800  # the workload's 50 %, headers passed through
    assert all(m.key() == h["guarantee-id"] for m, h in zip(seen, headers, strict=True) if h)
    assert len({m.partition() for m in seen}) == 6  # spread over every destination


def test_bench_quick_run_reports_every_stage_and_ends_with_the_ratio(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "ops" / "bench.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert re.fullmatch(r"ratio router/raw = \d+\.\d\d", lines[-1]), lines[-1]
    assert float(lines[-1].rsplit(" ", 1)[1]) > 0
    md = (out / "results.md").read_text()
    for stage in (
        "raw relay (send side)",
        "raw relay (receive side)",
        "send unit",
        "receive unit",
        "raw relays chained",
        "whole path",
    ):
        rows = [r for r in md.splitlines() if r.startswith(f"| {stage} |")]
        assert rows, f"no row for {stage}"
        assert all(float(r.split("|")[4].replace(",", "")) > 0 for r in rows), rows
    assert "| whole path | " in md.split("## Latency")[1]
    for png in ("routing-cost.png", "throughput-by-size.png", "latency.png", "scaling.png"):
        assert (out / png).stat().st_size > 10_000, png
    assert re.search(r"\[\s*\d+/\d+\s+\d+s\] filled", proc.stdout)  # progress while it runs
