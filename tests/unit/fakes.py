"""Stand-ins for confluent-kafka's Message, for the pure steps' tests (no broker)."""

from __future__ import annotations

from dataclasses import dataclass, field

from router import contract


@dataclass
class FakeMessage:
    topic_: str
    partition_: int
    offset_: int
    value_: bytes | None = b"payload"
    key_: bytes | None = None
    headers_: list[tuple[str, bytes | None]] | None = field(default_factory=list)
    timestamp_: tuple[int, int] = (1, 1_700_000_000_000)

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def value(self) -> bytes | None:
        return self.value_

    def key(self) -> bytes | None:
        return self.key_

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self.headers_ or None

    def timestamp(self) -> tuple[int, int]:
        return self.timestamp_

    def error(self) -> None:
        return None


def msg(
    offset: int,
    gid: str | None = None,
    *,
    final: bool = False,
    seq: int | None = None,
    topic: str = "in",
    partition: int = 0,
    value: bytes | None = b"payload",
    extra: list[tuple[str, bytes | None]] | None = None,
    headers: list[tuple[str, bytes | None]] | None = None,
) -> FakeMessage:
    """A consumed message: routing headers for `gid`, then `extra` (or exactly `headers`)."""
    if headers is None:
        headers = [*contract.headers_for(gid, final=final, seq=seq), *(extra or [])]
    return FakeMessage(topic, partition, offset, value, None, headers)
