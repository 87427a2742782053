"""Blocking Kafka calls on a daemon thread, with a hard deadline.

librdkafka has been seen to block past its own timeout when a transaction coordinator
disappears. A call that never returns is abandoned with its thread (a daemon never holds
up the process's exit); its owner replaces the producer, which fences the stuck one.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from router.backends.kafka.fatal import unmasked
from router.errors import RouterError

Done = queue.SimpleQueue[tuple[bool, Any]]


class Abandoned(RouterError):
    """The call did not return in time (or a stop request cut its grace short)."""


def clear_chain(exc: BaseException) -> None:
    """Clear the locals of every frame in `exc`'s traceback and in those of the exceptions
    it was raised from or while handling (`__cause__`, `__context__`): a call that failed
    while handling another failure keeps nothing of what it was given either. The lines
    stay to be printed."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        todo += (e.__cause__, e.__context__)


class CallThread:
    """Runs one call at a time on a daemon thread."""

    def __init__(self, name: str = "txn-call") -> None:
        self._tasks: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], Done] | None] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._work, name=name, daemon=True).start()

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:  # retired
                return
            call, args, done = task
            del task
            # Nothing of a call (its producer) is kept past it: not until the next call,
            # which never comes to a retired thread, nor by its exception's traceback
            # and the ones it was raised from or while handling (their frames' locals
            # cleared; the lines stay to be printed).
            try:
                result = (True, call(*args))
            except BaseException as exc:
                clear_chain(exc)
                result = (False, unmasked(exc))  # a fatal error, not confluent-kafka's mask
            del call, args
            done.put(result)
            del done, result

    def retire(self) -> None:
        """The thread ends as soon as its current call returns (an abandoned call may
        never): neither the thread nor what its calls were given outlives it."""
        self._tasks.put(None)

    def submit(self, call: Callable[..., Any], *args: Any) -> Done:
        done: Done = queue.SimpleQueue()
        self._tasks.put((call, args, done))
        return done

    @staticmethod
    def wait(
        done: Done,
        timeout: float,
        stop: threading.Event,
        grace: float,
        stuck: Callable[[float], bool] | None = None,
    ) -> Any:
        """The call's result (or its exception, raised). Abandoned on the deadline, or
        `grace` seconds after `stop` is set, or once `stuck(time.monotonic())` says so
        (asked every 0.25 s at most), whichever comes first."""
        deadline = time.monotonic() + timeout
        stopping = False
        while True:
            now = time.monotonic()
            if not stopping and stop.is_set():
                stopping = True
                deadline = min(deadline, now + grace)
            if now >= deadline or (stuck is not None and stuck(now)):
                try:  # the call may have ended meanwhile: its outcome, not Abandoned
                    ok, value = done.get_nowait()
                    break
                except queue.Empty:
                    raise Abandoned from None
            try:
                ok, value = done.get(timeout=min(deadline - now, 0.25))
                break
            except queue.Empty:
                continue
        if ok:
            return value
        try:
            raise value
        finally:
            del value  # else this frame and the exception hold each other (and its call)
