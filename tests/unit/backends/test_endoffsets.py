"""`EndOffsets`' handling of failed answers (pure logic: the admin client is a fake; the
real broker's case, a restart, is tests/integration/backends/test_endoffsets_read_committed.py):
a failed answer leaves the partition out and makes the admin client again, at most once per
`REMAKE_S`, and the client goes to `dispose_in_background`."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from router.backends.kafka import endoffsets
from router.backends.kafka.endoffsets import EndOffsets


class Offset:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class FakeAdmin:
    made: list[FakeAdmin] = []
    fail = False
    offset = 7

    metadata_down = False
    unknown: set[str] = set()

    def __init__(self, config: dict[str, Any]) -> None:
        FakeAdmin.made.append(self)
        self.calls: list[tuple[str, Any]] = []

    def describe_topics(self, topics: Any, **_: Any) -> dict[str, Future[None]]:
        names = list(topics.topic_names)
        self.calls.append(("metadata", names))
        out: dict[str, Future[None]] = {}
        for name in names:
            f: Future[None] = Future()
            if FakeAdmin.metadata_down or name in FakeAdmin.unknown:
                f.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            else:
                f.set_result(None)
            out[name] = f
        return out

    def list_offsets(self, request: dict[Any, Any], **_: Any) -> dict[Any, Future[Offset]]:
        self.calls.append(("offsets", sorted((tp.topic, tp.partition) for tp in request)))
        out: dict[Any, Future[Offset]] = {}
        for tp in request:
            f: Future[Offset] = Future()
            if FakeAdmin.fail:
                f.set_exception(KafkaException(KafkaError(KafkaError.FENCED_LEADER_EPOCH)))
            else:
                f.set_result(Offset(FakeAdmin.offset))
            out[tp] = f
        return out


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> tuple[list[float], list[list[Any]]]:
    now = [50.0]  # a machine that booted a minute ago
    disposed: list[list[Any]] = []
    FakeAdmin.made, FakeAdmin.fail, FakeAdmin.offset = [], False, 7
    FakeAdmin.metadata_down, FakeAdmin.unknown = False, set()
    monkeypatch.setattr(endoffsets, "AdminClient", FakeAdmin)
    monkeypatch.setattr(endoffsets, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(endoffsets, "dispose_in_background", disposed.append)
    return now, disposed


def test_a_failed_answer_makes_the_admin_client_again_at_most_once_per_remake_s(
    env: tuple[list[float], list[list[Any]]], caplog: pytest.LogCaptureFixture
) -> None:
    now, disposed = env
    caplog.set_level(logging.INFO, logger="router.endoffsets")
    ends = EndOffsets({"bootstrap.servers": "x"})
    assert ends([("t", 0)]) == {("t", 0): 7}
    assert len(FakeAdmin.made) == 1

    FakeAdmin.fail = True
    now[0] += 1.0
    for _ in range(10):  # within REMAKE_S of the client's making: the same client
        assert ends([("t", 0), ("t", 1)]) == {}
        now[0] += 0.1
    assert len(FakeAdmin.made) == 1 and disposed == []
    now[0] += endoffsets.REMAKE_S
    assert ends([("t", 0)]) == {}  # dropped here, made again on the next request
    assert len(disposed) == 1 and disposed[0] == [FakeAdmin.made[0]]
    assert ends([("t", 0)]) == {}
    assert len(FakeAdmin.made) == 2
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "FENCED_LEADER_EPOCH" in warnings[0].getMessage()

    FakeAdmin.fail = False
    assert ends([("t", 0)]) == {("t", 0): 7}
    assert ends.failures == {}
    assert "end offsets answered again after 12 failed requests" in caplog.text


def test_ends_and_starts_count_their_failures_apart(
    env: tuple[list[float], list[list[Any]]], caplog: pytest.LogCaptureFixture
) -> None:
    """An answered ask of one kind says nothing of the other's failures: the log says
    which kind failed, how often, and when that kind was answered again."""
    caplog.set_level(logging.DEBUG, logger="router.endoffsets")
    ends = EndOffsets({"bootstrap.servers": "x"})
    FakeAdmin.fail = True
    assert ends([("t", 0)]) == {} and ends([("t", 0)]) == {}
    FakeAdmin.fail = False
    assert ends.starts([("t", 0)]) == {("t", 0): 7}
    assert ends.failures == {"end": 2}
    assert "answered again" not in caplog.text
    FakeAdmin.fail = True
    assert ends.starts([("t", 0)]) == {}
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and warnings[1].startswith("start offsets")
    FakeAdmin.fail = False
    assert ends([("t", 0)]) == {("t", 0): 7} and ends.failures == {"start": 1}
    assert "end offsets answered again after 2 failed requests" in caplog.text


def test_close_lets_the_client_go_and_a_later_request_makes_one(
    env: tuple[list[float], list[list[Any]]],
) -> None:
    _, disposed = env
    ends = EndOffsets({"bootstrap.servers": "x"}, committed=False)
    ends.close()
    assert disposed == [] and FakeAdmin.made == []  # never made: nothing to let go
    assert ends([("t", 0)]) == {("t", 0): 7}
    ends.close()
    assert disposed == [[FakeAdmin.made[0]]]
    assert ends([]) == {} and len(FakeAdmin.made) == 1  # nothing asked: no client


def test_an_answer_without_an_offset_is_a_failure_not_an_end(
    env: tuple[list[float], list[list[Any]]],
) -> None:
    """librdkafka resolved the futures of a request sent as the broker was killed with
    offset -1001 (OFFSET_INVALID) and no error: as an end, every position is past it."""
    now, disposed = env
    ends = EndOffsets({"bootstrap.servers": "x"})
    FakeAdmin.offset = -1001
    assert ends([("t", 0), ("t", 1)]) == {}
    assert ends.failures == {"end": 1}
    now[0] += endoffsets.REMAKE_S
    assert ends([("t", 0)]) == {}
    assert len(disposed) == 1  # a client that answers so is made again too
    FakeAdmin.offset = 7
    assert ends([("t", 0)]) == {("t", 0): 7} and ends.failures == {}


def test_a_client_reads_each_topics_metadata_once_before_its_first_offsets(
    env: tuple[list[float], list[list[Any]]],
) -> None:
    """librdkafka's own leader lookup, with an empty metadata cache, made a new client's
    first ListOffsets wait 1 or 3 s about one time in four: the client describes the topics
    it has not read yet first, in one request; a new client reads them again; a topic that
    cannot be described is left out (an unknown one: the others are answered), and if none
    can be (the broker away) no offsets request is sent: an outage costs one timeout."""
    now, _ = env
    ends = EndOffsets({"bootstrap.servers": "x"})
    assert ends([("a", 0), ("b", 1), ("a", 1)]) == {("a", 0): 7, ("b", 1): 7, ("a", 1): 7}
    assert ends.starts([("a", 0)]) == {("a", 0): 7}
    admin = FakeAdmin.made[0]
    assert admin.calls == [
        ("metadata", ["a", "b"]),
        ("offsets", [("a", 0), ("a", 1), ("b", 1)]),
        ("offsets", [("a", 0)]),
    ]
    FakeAdmin.unknown = {"gone"}
    assert ends([("gone", 0), ("a", 0)]) == {("a", 0): 7} and ends.failures == {"end": 1}
    assert admin.calls[-2:] == [("metadata", ["gone"]), ("offsets", [("a", 0)])]
    FakeAdmin.metadata_down = True
    assert ends([("c", 0)]) == {} and ends.failures == {"end": 2}
    assert admin.calls[-1] == ("metadata", ["c"])
    now[0] += endoffsets.REMAKE_S
    assert ends([("c", 0)]) == {}  # the client dropped, made again next time
    FakeAdmin.metadata_down = False
    assert ends([("a", 0)]) == {("a", 0): 7}
    assert FakeAdmin.made[-1].calls == [("metadata", ["a"]), ("offsets", [("a", 0)])]
