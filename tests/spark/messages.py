"""Messages of the demo domain written straight to Kafka, as a sender would (routing
headers and the `schema` header), with the creation time a test chooses."""

from __future__ import annotations

import datetime as dt
import hashlib

from confluent_kafka import Producer

from router import contract
from router.contract import request as sendrequest
from router.contract import schemas, segments
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


def document(doc: str, content: bytes, created: dt.datetime = NOW) -> bytes:
    return schemas.encode(
        domain.DOCUMENT_MESSAGE,
        {
            "record_id": doc,
            "document_id": doc,
            "name": f"{doc}.bin",
            "created_at": created,
            "content": content,
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

    def segmented(
        self,
        topic: str,
        value: bytes,
        size: int,
        schema: str | None,
        *,
        gid: str | None = None,
        first_seq: int = 0,
        final: bool = True,
        set_id: str = "",
        created: dt.datetime = NOW,
    ) -> list[tuple[str, list[tuple[str, bytes]], bytes]]:
        """`value` in segments of `size` bytes as `router.contract.segments.plan` cuts them (a
        group member, or an ordinary message's group of its own), with the `schema` and
        `created-ms` headers; returns what it produced (topic, headers, value), so that a
        test may produce a broken variant instead."""
        request = sendrequest.request(
            [],
            guarantee_id=gid,
            final=final and gid is not None,
            message_type=None,
            ttl_ms=None,
            delivery=None,
        )
        digest = hashlib.sha256(value).hexdigest()
        plan = segments.plan(request, len(value), digest, size, set_id)
        out = []
        for i, part in enumerate(plan.parts):
            r = part.request
            headers = contract.headers_for(r.guarantee_id, final=r.final, seq=first_seq + i)
            headers += [
                (k, v if isinstance(v, bytes) else str(v).encode()) for k, v in part.headers
            ]
            if schema is not None:
                headers.append((schemas.SCHEMA_HEADER, schema.encode()))
            ms = round(created.timestamp() * 1000)
            headers.append((domain.CREATED_HEADER, str(ms).encode()))
            out.append((topic, headers, value[part.start : part.end]))
        return out

    def produce(self, records: list[tuple[str, list[tuple[str, bytes]], bytes]]) -> None:
        for topic, headers, value in records:
            gid = dict(headers).get(contract.GUARANTEE_ID)
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
