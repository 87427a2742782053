"""`make spark-bench` in small: Spark's rate source -> Spark sender -> send units ->
receive units -> Spark receiver, on the real stack, with either sender (the micro-batch
one on the rate source; the real-time one on an upstream topic the rate source fills);
every message the rate source generated (recomputed from its rows) is in the receiver's
output once, and the figures (rate, group latency, each hop's share of it, each query's
phases) come out of one run."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

from ops.harness.console import Console
from ops.harness.spark.bench_flow import SENDERS, BenchSpec, run_bench
from ops.harness.stack.pipeline import PipelineSpec
from router.config import load_settings

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize("sender", SENDERS)
def test_a_short_spark_bench_accounts_for_every_message_and_reports_its_figures(
    sender: str,
    spark: Any,
    kafka_bootstrap: str,
    redis_url: str,
    redis_prefix: str,
    tmp_path: Path,
) -> None:
    base = load_settings(
        kafka={"bootstrap_servers": kafka_bootstrap},
        redis={"url": redis_url, "key_prefix": redis_prefix},
    )
    spec = BenchSpec(
        rate=400, seconds=20, warmup_s=5, drain_timeout_s=60, max_lines=8, sender=sender
    )
    pipeline = PipelineSpec(send_units=1, receive_units=1, transfer_partitions=2, receive_queues=2)
    log = io.StringIO()
    result = run_bench(spark, base, spec, pipeline, tmp_path / "spark-bench-test", out=Console(log))

    assert result["failures"] == [], log.getvalue()
    c = result["completeness"]
    assert result["complete"], (c, log.getvalue())
    assert c["generated_rows"] > 0 and c["received_messages"] == c["expected_messages"]
    assert c["groups_complete"] == c["expected_groups"] > 0
    assert result["sent_messages"] == c["expected_messages"]
    assert result["achieved_msg_s"] > 0 and result["window_batches"] >= 2
    lat = result["latency"]
    assert lat["groups"] > 0 and 0 < lat["p50_ms"] <= lat["p99_ms"] <= lat["max_ms"]
    assert not math.isnan(result["offered_msg_s"])
    assert "addBatch" in result["receiver_profile_ms"]
    # Each hop from the final's times on the topics it crossed; they add up to the whole.
    hops = result["hops"]
    assert hops["lacking"] == 0, hops
    whole = hops["hops"]["whole"]
    assert whole["groups"] == lat["groups"] and whole["p99_ms"] <= lat["max_ms"], (whole, lat)
    for hop in ("sender", "send unit", "receive unit", "receiver"):
        assert hops["hops"][hop]["groups"] == whole["groups"], hop
        assert 0 <= hops["hops"][hop]["p50_ms"] <= whole["p99_ms"], (hop, hops)
    saved = json.loads((tmp_path / "spark-bench-test" / "result.json").read_text())
    assert saved["completeness"] == c
