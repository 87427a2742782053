"""What a unit keeps of a producer it replaced (`router.unit.commit.session`): nothing, and
it never destroys one on its own thread. A call abandoned at its deadline used to keep
its thread, and through it the producer, for the life of the process, after the call came
back; a replaced producer was destroyed on the run loop's thread, which can hang for good
after a broker restart (librdkafka#5476, `dispose_in_background`). A scripted stand-in
for the producer; the real-broker path is in tests/integration/unit/test_session.py."""

from __future__ import annotations

import gc
import threading
import time
import traceback
import weakref
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from router.backends.kafka.callthread import Abandoned, CallThread
from router.metrics.registry import Metrics
from router.unit.commit import finishing
from router.unit.commit import session as session_module
from router.unit.commit.session import TransactionalSession
from router.unit.commit.txnstate import TxnFailed, TxnState
from tests.fixtures.txnproducers import Scripted, StuckOffsets, commit_one, session_of


def gone_within(ref: weakref.ref[Any], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        gc.collect()
        if ref() is None:
            return True
        time.sleep(0.05)
    return False


def threads(name: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name == name and t.is_alive())


class Held:
    """An object a call is given."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def block(self) -> str:
        self.release.wait(30)
        return "late"


def test_a_retired_call_thread_ends_and_lets_its_call_go_once_the_call_returns() -> None:
    held = Held()
    ref = weakref.ref(held)
    calls = CallThread(name="test-retired-call")
    done = calls.submit(held.block)
    with pytest.raises(Abandoned):
        CallThread.wait(done, 0.2, threading.Event(), 0)
    assert threads("test-retired-call") == 1
    calls.retire()
    release = held.release
    del held
    assert not gone_within(ref, 0.3)  # still in its call
    release.set()
    assert done.get(timeout=5) == (True, "late")
    assert gone_within(ref, 5), "the retired thread still holds what its call was given"
    deadline = time.monotonic() + 5
    while threads("test-retired-call") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert threads("test-retired-call") == 0


def test_a_call_thread_keeps_nothing_of_a_call_that_returned() -> None:
    held = Held()
    held.release.set()
    ref = weakref.ref(held)
    calls = CallThread(name="test-idle-call")
    assert CallThread.wait(calls.submit(held.block), 5, threading.Event(), 0) == "late"
    del held
    assert gone_within(ref, 5), "an idle call thread holds its last call's arguments"
    calls.retire()


def test_a_producer_replaced_after_an_abandoned_commit_is_let_go_when_its_call_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(finishing, "OFFSETS_DEADLINE_S", 0.3)
    stuck = StuckOffsets()
    ref = weakref.ref(stuck)
    session = session_of(stuck, Scripted())
    with pytest.raises(TxnFailed):
        commit_one(session)
    assert session.replace() and session.producer is not stuck
    release = stuck.release
    del stuck
    release.set()  # the abandoned commit comes back
    assert gone_within(ref, 5), "the replaced producer is still held"
    commit_one(session)


def test_a_replaced_producer_is_destroyed_off_the_run_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old producer's last reference goes on another thread than the caller's."""
    where: list[str] = []

    class Noted(Scripted):
        def __del__(self) -> None:
            where.append(threading.current_thread().name)

    session = session_of(Noted(), Noted())
    session.retire("test")
    assert session.replace()
    deadline = time.monotonic() + 5
    while not where and time.monotonic() < deadline:
        time.sleep(0.02)
    assert where and where[0] != threading.current_thread().name, where


# (A review's findings.) A call that failed kept its producer in a reference cycle (the
# exception, its traceback, the frames that called it), so the producer went with the next
# garbage collection, on whatever thread ran it: usually the run loop's.

FATAL = KafkaError(KafkaError._FENCED, "fenced", fatal=True)


class Native:
    """Like confluent-kafka's Producer: its methods keep no frame that refers to it; notes
    the thread its last reference went on."""

    def __init__(self, where: list[str], **fail: KafkaError) -> None:
        self.fail, self.where = fail, where

    def __del__(self) -> None:
        self.where.append(threading.current_thread().name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        err = self.fail.pop(name, None)

        def call(*args: Any) -> None:
            if err is not None:
                raise KafkaException(err)

        return call

    def init_transactions(self, *args: Any) -> None:
        err = self.fail.pop("init_transactions", None)
        del self  # the bound method the session passed on still holds it
        if err is not None:
            raise KafkaException(err)


@pytest.fixture
def collected_here(monkeypatch: pytest.MonkeyPatch) -> Any:
    """No collection but the test's own, on this thread; no log record keeping an error
    (pytest's capture keeps them, a unit's handlers do not)."""
    monkeypatch.setattr(session_module.log, "disabled", True)
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def let_go_elsewhere(where: list[str]) -> None:
    deadline = time.monotonic() + 5
    while not where and time.monotonic() < deadline:
        time.sleep(0.02)
    gc.collect()  # what the run loop's next allocations would do
    assert where and where[0] != threading.current_thread().name, where


def test_a_producer_whose_commit_failed_is_let_go_off_the_run_loop(collected_here: Any) -> None:
    where: list[str] = []
    session = session_of(Native(where, commit_transaction=FATAL), Native([]))
    with pytest.raises(TxnFailed):
        commit_one(session)
    assert session.state is TxnState.BROKEN and session.replace()
    let_go_elsewhere(where)


def test_a_producer_that_could_not_start_is_let_go_off_the_run_loop(collected_here: Any) -> None:
    where: list[str] = []
    pool = [Native(where, init_transactions=FATAL), Native([])]
    session = TransactionalSession(lambda: pool.pop(0), threading.Event(), Metrics())
    assert not session.start()
    let_go_elsewhere(where)


def test_a_new_producer_whose_start_failed_is_let_go_off_the_run_loop(
    collected_here: Any,
) -> None:
    where: list[str] = []
    session = session_of(Native([]), Native(where, init_transactions=FATAL), Native([]))
    session.retire("a test")
    assert not session.replace()
    let_go_elsewhere(where)


def test_a_broken_producer_is_let_go_off_the_run_loop_when_the_unit_stops(
    collected_here: Any,
) -> None:
    """(A second review's finding.) A stop during the back-off after a fatal commit: the
    unit's run ends with the session BROKEN, and its producer went with the unit as the
    process exited, on the main thread (a destroy that hangs would hold the exit)."""
    where: list[str] = []
    session = session_of(Native(where, commit_transaction=FATAL))
    with pytest.raises(TxnFailed):
        commit_one(session)
    assert session.state is TxnState.BROKEN and not session.abort()  # the run's `finally`
    session.close()
    del session
    let_go_elsewhere(where)


class Chained:
    """A call that fails while handling a failure of its own, and one raised from it: the
    inner frames (which hold `self`) are in the outer exception's `__context__` and
    `__cause__`, not in its traceback."""

    def handling(self) -> None:
        try:
            self.fail_inner()
        except ValueError:
            raise RuntimeError("while handling")  # noqa: B904 (the __context__ is the point)

    def raised_from(self) -> None:
        try:
            self.fail_inner()
        except ValueError as exc:
            raise RuntimeError("raised from") from exc

    def fail_inner(self) -> None:
        me = self  # a local of the inner frame that refers to the call's object
        raise ValueError(f"inner {id(me)}")


@pytest.mark.parametrize("how", ["handling", "raised_from"])
def test_a_call_that_failed_while_handling_a_failure_keeps_nothing_of_its_object(
    collected_here: Any, how: str
) -> None:
    """Clearing only the outer traceback's frames left the inner exception's frames, and
    with them the call's object (the producer), alive for as long as the caller kept the
    exception: a failed call's exception travels up the run loop and into logs."""
    held = Chained()
    ref = weakref.ref(held)
    calls = CallThread(name="test-chained-call")
    with pytest.raises(RuntimeError) as raised:
        CallThread.wait(calls.submit(getattr(held, how)), 5, threading.Event(), 0)
    del held
    assert ref() is None, "the inner frames still hold the call's object"
    assert "fail_inner" in "".join(traceback.format_exception(raised.value)), "lines kept"
    calls.retire()
