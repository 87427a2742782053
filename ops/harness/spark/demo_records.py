"""The Spark demo's records for the verdict (`ops.harness.verdict.records`): what the Spark
sender was given (`expected`: the input files, as the messages it must send), what the
destinations hold (`spark_message`: a message of the Spark sender, by its payload or its
segment headers), and what the Spark receiver accounted for (`read_output`: its Parquet
output, through the file sink's log)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Message
from pyspark.sql import functions as F

from ops.harness.verdict.records import Seen, Sent
from router import contract
from router.config import RoutingSettings
from router.contract import schemas, segments
from spark_jobs import domain, outputs


@dataclass
class ReceiverOutput:
    seen: list[Seen] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    undecodable: int = 0
    reasons: list[str] = field(default_factory=list)


def read_output(spark: Any, output: Path) -> ReceiverOutput:
    """Every message the receiver accounted for, as `Seen` records, from its Parquet
    output (read through the file sink's log: committed micro-batches only)."""
    out = ReceiverOutput()
    if not (output / "_spark_metadata").is_dir():
        out.rows = dict.fromkeys(outputs.OUTPUTS, 0)
        return out
    df = outputs.read(spark, str(output)).persist()
    out.rows = {name: 0 for name in outputs.OUTPUTS}
    out.rows.update(
        {r.output: r.n for r in df.groupBy("output").agg(F.count("*").alias("n")).collect()}
    )
    latency = F.unix_millis("received_at") - F.unix_millis("m.created_at")
    members = df.where(F.col("members").isNotNull()).select(
        "output",
        "queue",
        "guarantee_id",
        "messages",
        "received_at",
        "reason",
        F.explode("members").alias("m"),
    )
    for r in members.select("*", "m.*", latency.alias("latency")).collect():
        final = r.seq == r.messages - 1
        out.seen.append(Seen(r.queue, r.offset, r.record_id, r.guarantee_id, r.seq, final))
        if r.output == "groups":
            out.latencies_ms.append(float(r.latency))
        else:
            out.reasons.append(f"{r.guarantee_id}: {r.reason}")
    single = df.where(F.col("members").isNull()).select(
        "output",
        "queue",
        "offset",
        "record_id",
        "guarantee_id",
        "seq",
        "final",
        "reason",
        (F.unix_millis("received_at") - F.unix_millis("created_at")).alias("latency"),
    )
    for r in single.collect():
        record_id = r.record_id or f"unreadable:{r.queue}@{r.offset}"
        seq = r.seq if r.guarantee_id is not None and r.seq is not None else 0
        out.seen.append(Seen(r.queue, r.offset, record_id, r.guarantee_id, seq, bool(r.final)))
        if r.output == "records":
            out.latencies_ms.append(float(r.latency))
        elif r.output == "violations":
            out.undecodable += (r.reason or "").startswith("undecodable")
            if len(out.reasons) < 5:
                out.reasons.append(f"{r.guarantee_id or r.record_id}: {r.reason}")
    df.unpersist()
    return out


def spark_message(dest: str, m: Message) -> Seen | None:
    """A message of the Spark sender, identified by its payload (its schema named by the
    sender's schema header), with its append time on `dest`. A segment of a large
    document (a piece of its payload) is identified by its segment headers instead
    (`<segment-id>#<index>`, in the group of its own that carries it) and dated by the
    sender's `created-ms` header."""
    headers = dict(m.headers() or [])
    try:
        seg = segments.read(list(headers.items()))
        routing = contract.parse(list(headers.items()), RoutingSettings()) if seg else None
    except (segments.BadSegment, contract.BadInput):
        return None
    if seg is not None and routing is not None:
        created = headers.get(domain.CREATED_HEADER) or b""
        return Seen(
            dest,
            m.offset(),
            f"{seg.set_id}#{seg.index}",
            routing.guarantee_id,
            routing.seq if routing.seq is not None else seg.index,
            routing.final,
            None,
            m.timestamp()[1],
            int(created) if created.isdigit() else None,
        )
    name = (headers.get(schemas.SCHEMA_HEADER) or b"").decode()
    try:
        p = schemas.decode(name, m.value())
    except Exception:
        return None
    if name == domain.ORDER_LINE:
        group, seq, final = (
            domain.order_group(p["order_id"]),
            p["line_no"],
            p["line_no"] == p["line_count"] - 1,
        )
    else:
        group, seq, final = None, 0, False
    created_ms = round(p["created_at"].timestamp() * 1000)
    return Seen(
        dest, m.offset(), p["record_id"], group, seq, final, None, m.timestamp()[1], created_ms
    )


def expected(input_dir: Path, segment_bytes: int) -> list[Sent]:
    """What the sender was given, as the messages it must send (in `domain` terms)."""
    sent: list[Sent] = []
    for path in sorted(input_dir.glob("*.json")):
        lines = path.read_text().splitlines()
        sent.extend(Sent(*m) for m in domain.expected_from_lines(lines, segment_bytes))
    return sent
