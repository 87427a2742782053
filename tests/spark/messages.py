"""Messages of the demo domain written straight to Kafka, as a sender would (routing
headers and the `schema` header), with the creation time a test chooses."""

from __future__ import annotations

import datetime as dt
import hashlib

from confluent_kafka import Producer

from router import contract, schemas
from spark_jobs import domain

NOW = dt.datetime.now(dt.UTC)


def order_line(order: str, line: int, count: int, created: dt.datetime = NOW) -> bytes:
    return schemas.encode(
        domain.ORDER_LINE,
        {
            "record_id": f"{order}/{line}",
            "order_id": order,
            "customer_id": "C-1",
            "line_no": line,
            "line_count": count,
            "sku": f"SKU-{line}",
            "quantity": line + 1,
            "unit_price_cents": 100,
            "currency": "EUR",
            "created_at": created,
        },
    )


def segment(doc: str, content: bytes, i: int, size: int) -> bytes:
    n = domain.segment_count(len(content), size)
    return schemas.encode(
        domain.DOCUMENT_SEGMENT,
        {
            "record_id": f"{doc}/{i}",
            "document_id": doc,
            "name": f"{doc}.bin",
            "segment_no": i,
            "segment_count": n,
            "data": content[i * size : (i + 1) * size],
            "document_bytes": len(content),
            "document_sha256": hashlib.sha256(content).hexdigest(),
            "created_at": NOW,
        },
    )


def stock(update: str, created: dt.datetime = NOW) -> bytes:
    return schemas.encode(
        domain.STOCK,
        {"record_id": update, "sku": "SKU-1", "warehouse": "W", "delta": 1, "created_at": created},
    )


class Queues:
    """Writes test messages as a sender would (routing headers + `schema` header)."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        self.count = 0

    def send(
        self,
        topic: str,
        value: bytes | None,
        schema: str | None,
        gid: str | None = None,
        seq: int | None = None,
        final: bool = False,
    ) -> None:
        headers = contract.headers_for(gid, final=final, seq=seq)
        if schema is not None:
            headers.append((schemas.SCHEMA_HEADER, schema.encode()))
        self.producer.produce(topic, value, key=gid, headers=headers)
        self.count += 1

    def order(self, topic: str, order: str, lines: int, *, skip: int | None = None) -> None:
        for i in range(lines):
            if i != skip:
                self.send(
                    topic,
                    order_line(order, i, lines),
                    domain.ORDER_LINE,
                    f"po/{order}",
                    i,
                    i == lines - 1,
                )

    def flush(self) -> None:
        assert self.producer.flush(30) == 0
