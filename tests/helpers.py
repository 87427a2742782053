"""Small test utilities shared by the suites."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Consumer, TopicPartition

from router.config import RouterSettings
from router.contract import schemas

T = TypeVar("T")


def unique(prefix: str) -> str:
    """A name no other test (or earlier run against the same stack) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_until(
    condition: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.05,
    report: Callable[[], str] | None = None,
) -> T:
    """Poll `condition` until it returns a truthy value; fail the test after `timeout` s
    (with `report()`, if given, appended to the failure: what the test saw meanwhile)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = condition()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:.1f}s waiting for {what} (last: {last!r})"
                + (f"\n{report()}" if report else "")
            )
        time.sleep(interval)


def read_records(s: RouterSettings, topic: str, schema: str, want: int) -> list[dict[str, Any]]:
    """The first `want` records of schema `schema` on partition 0 of `topic`, decoded
    (read_committed, waiting at most 60 s)."""
    consumer = Consumer(
        {
            "bootstrap.servers": s.kafka.bootstrap_servers,
            "group.id": unique("read"),
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    records: list[dict[str, Any]] = []

    def enough() -> bool:
        m = consumer.poll(0.2)
        if (
            m is not None
            and m.error() is None
            and dict(m.headers() or []).get(schemas.SCHEMA_HEADER) == schema.encode()
        ):
            records.append(schemas.decode(schema, m.value()))
        return len(records) >= want

    wait_until(enough, 60, f"{want} {schema} records on {topic}")
    consumer.close()
    return records


def http_get(url: str) -> tuple[int, bytes]:
    """(status, body) of a GET; (0, b"") if nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""
