"""Every exception the router defines derives from `router.errors.RouterError` and keeps
its built-in base: a caller catches anything the router raised with `except RouterError`,
and code that caught `ValueError`, `TimeoutError`, ... before still does (pure: imports
router's modules, no servers)."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis
from pydantic import ValidationError

import router
from router import errors
from router.backends.kafka.callthread import Abandoned
from router.config import RouterSettings, load_settings
from router.config import client as clientconfig
from router.contract import priority
from router.contract.headers import BadInput
from router.contract.request import request
from router.contract.segments import BadSegment
from router.errors import (
    ConfigError,
    ConfigNotFound,
    InvalidRequest,
    NotReady,
    RouterError,
    TimedOut,
)
from router.receiver.client import ReceiveTimeout
from router.receiver.letters import DeadLetterFailed
from router.receiver.reassembly import SegmentError
from router.security.kafka import KafkaRefused
from router.security.redis import RedisRefused
from router.sender.groups import DeliveryFailed
from router.state.store import SenderFenced
from router.sweeper.horizon import HorizonUnknown
from router.table.steer import SteerError
from router.table.view import UnknownState
from router.unit.commit.leases import LeaseLost
from router.unit.commit.replica_acks import NotReplicated
from router.unit.commit.txnstate import TxnFailed
from router.unit.source import FatalUnitError

# ---------------------------------------------------------------------- every class


def modules(package: ModuleType) -> Iterator[ModuleType]:
    """`package` and every module under it, imported (a module that fails to import fails
    the test: `pkgutil.walk_packages` alone would skip it). `__main__` runs the command
    line when imported: it defines nothing."""
    yield package
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        if info.name.rpartition(".")[2] != "__main__":
            yield importlib.import_module(info.name)


def exceptions_defined_in(package: ModuleType) -> dict[str, type[BaseException]]:
    """`module.Name` -> every exception class a module under `package` defines."""
    found: dict[str, type[BaseException]] = {}
    for module in modules(package):
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{name}"] = obj
    return found


# The 18 classes there were before RouterError, in every layer: the walk must reach them.
BEFORE = {
    "router.sender.groups.DeliveryFailed",
    "router.contract.headers.BadInput",
    "router.contract.segments.BadSegment",
    "router.sweeper.horizon.HorizonUnknown",
    "router.sweeper.horizon._Unreachable",
    "router.unit.commit.leases.LeaseLost",
    "router.unit.commit.replica_acks.NotReplicated",
    "router.unit.commit.txnstate.TxnFailed",
    "router.unit.source.FatalUnitError",
    "router.receiver.reassembly.SegmentError",
    "router.receiver.reading.ReceiveTimeout",
    "router.receiver.letters.DeadLetterFailed",
    "router.backends.kafka.callthread.Abandoned",
    "router.state.store.SenderFenced",
    "router.table.steer.SteerError",
    "router.table.view.UnknownState",
    "router.security.redis.RedisRefused",
    "router.security.kafka.KafkaRefused",
}


def test_every_exception_class_the_router_defines_derives_from_router_error() -> None:
    found = exceptions_defined_in(router)
    assert set(found) >= BEFORE, f"the walk missed {sorted(BEFORE - set(found))}"
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, RouterError))
    assert not outside, f"exceptions that `except RouterError` would not catch: {outside}"


def test_the_walk_reports_an_exception_class_outside_router_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above can fail: a class of a subpackage's module, not a RouterError."""
    package = tmp_path / "stray_pkg"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("")
    (package / "inner" / "mod.py").write_text(
        "from router.errors import RouterError\n"
        "class Kept(RouterError): pass\n"
        "class Stray(ValueError): pass\n"
        "ValueError2 = ValueError  # imported, not defined here\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        found = exceptions_defined_in(importlib.import_module("stray_pkg"))
        assert sorted(found) == ["stray_pkg.inner.mod.Kept", "stray_pkg.inner.mod.Stray"]
        assert not issubclass(found["stray_pkg.inner.mod.Stray"], RouterError)
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] == "stray_pkg"]:
            del sys.modules[name]


def test_router_error_and_the_decision_classes_are_reexported_at_router() -> None:
    from router import RouterError as top  # noqa: PLC0415 (the import under test)

    assert top is errors.RouterError
    for name in ("InvalidRequest", "ConfigError", "ConfigNotFound", "NotReady", "TimedOut"):
        assert getattr(router, name) is getattr(errors, name), name
        assert name in router.__all__
        assert issubclass(getattr(errors, name), RouterError)
    assert "RouterError" in router.__all__


# ---------------------------------------------------------------------- built-in bases


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (InvalidRequest, ValueError),
        (ConfigError, ValueError),
        (ConfigNotFound, FileNotFoundError),
        (NotReady, RuntimeError),
        (TimedOut, TimeoutError),
        (BadSegment, ValueError),
        (UnknownState, ValueError),
        (ReceiveTimeout, TimeoutError),
        (NotReplicated, redis.ConnectionError),
        (FatalUnitError, RuntimeError),
        (DeadLetterFailed, RuntimeError),
        (SenderFenced, RuntimeError),
        (RedisRefused, RuntimeError),
        (KafkaRefused, RuntimeError),
        (HorizonUnknown, Exception),
        (LeaseLost, Exception),
        (TxnFailed, Exception),
        (SteerError, Exception),
        (Abandoned, Exception),
    ],
    ids=lambda v: v.__name__,
)
def test_each_class_keeps_its_built_in_base_message_and_pickling(
    cls: type[RouterError], builtin: type[BaseException]
) -> None:
    with pytest.raises(builtin) as caught:
        raise cls("why")
    error = caught.value
    assert isinstance(error, RouterError)
    assert (str(error), error.args) == ("why", ("why",))
    if isinstance(error, OSError):  # the OSError instance layout, as a plain one has it
        assert (error.errno, error.strerror, error.filename) == (None, None, None)
    back = pickle.loads(pickle.dumps(error))
    assert (type(back), back.args, str(back)) == (cls, ("why",), "why")


def test_classes_with_their_own_arguments_are_router_errors_too() -> None:
    assert isinstance(DeliveryFailed(["a: timed out"]), RouterError)
    assert str(DeliveryFailed(["a: timed out"])) == "1 messages not delivered: a: timed out"
    bad = BadInput("bad-seq", "no")
    assert isinstance(bad, RouterError) and not isinstance(bad, ValueError)
    assert issubclass(SegmentError, RouterError) and not issubclass(SegmentError, ValueError)


# ---------------------------------------------------------------------- raise sites


def refused(call: Callable[[], Any], builtin: type[BaseException]) -> BaseException:
    """What `call` raises, caught by `except RouterError` and, when made again, by
    `except builtin` (what callers caught before RouterError existed)."""
    try:
        call()
    except RouterError as error:
        first: BaseException = error
    else:
        pytest.fail("nothing was raised")
    try:
        call()
    except builtin as error:
        again: BaseException = error
    else:
        pytest.fail("nothing was raised the second time")
    assert (type(again), str(again)) == (type(first), str(first))
    return first


def send(headers: Sequence[tuple[str, str | bytes | None]], **given: Any) -> Any:
    """`Sender.send`'s check of its arguments and headers."""
    args: dict[str, Any] = {
        "guarantee_id": None,
        "final": False,
        "message_type": None,
        "ttl_ms": None,
        "delivery": None,
        **given,
    }
    return request(headers, **args)


def test_a_bad_send_header_is_an_invalid_request_and_still_a_value_error() -> None:
    twice = [("guarantee-id", b"g"), ("guarantee-id", b"g")]
    error = refused(lambda: send(twice), ValueError)
    assert type(error) is InvalidRequest
    assert str(error) == "header 'guarantee-id' appears more than once in headers"
    error = refused(lambda: send([("guarantee-seq", "x")], guarantee_id="g"), ValueError)
    assert str(error) == "header 'guarantee-seq' must be a non-negative integer, not 'x'"
    error = refused(lambda: send([], final=True), ValueError)
    assert str(error) == "an ordinary message (no guarantee ID) cannot be final"


def test_a_bad_priority_is_an_invalid_request_and_still_a_value_error() -> None:
    header = [(priority.PRIORITY, b"high")]
    error = refused(lambda: priority.sender_band(None, header, 3), ValueError)
    assert type(error) is InvalidRequest
    assert str(error) == "header 'message-priority' must be one digit 0..9, not 'high'"
    twice = [(priority.PRIORITY, b"5")]
    error = refused(lambda: priority.sender_band(5, twice, 3), ValueError)
    assert str(error) == "give the priority once: priority=5 and a 'message-priority' header"
    error = refused(lambda: priority.header(10), ValueError)
    assert str(error) == "priority must be 0..9, not 10"


def test_contradicting_settings_are_a_config_error_and_still_a_value_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ROUTER_CONFIG", raising=False)
    contradiction = {"min_ttl_ms": 5_000, "max_ttl_ms": 1_000}
    error = refused(lambda: load_settings(routing=contradiction), ValueError)
    assert type(error) is ConfigError
    cause = error.__cause__
    assert isinstance(cause, ValidationError)  # pydantic's, with the same message
    assert str(error) == str(cause) and "min_ttl_ms must not exceed max_ttl_ms" in str(error)
    # Built directly, the model still raises pydantic's ValidationError (a ValueError),
    # made of the validator's ConfigError.
    with pytest.raises(ValidationError) as direct:
        RouterSettings(routing=contradiction)
    assert isinstance(direct.value.errors()[0]["ctx"]["error"], ConfigError)


def test_a_missing_configuration_file_is_a_config_error_and_still_file_not_found() -> None:
    error = refused(lambda: load_settings("/nonexistent/router.toml"), FileNotFoundError)
    assert type(error) is ConfigNotFound and isinstance(error, ConfigError)
    assert str(error) == "configuration file not found: /nonexistent/router.toml"


def test_a_clients_contradicting_config_is_a_config_error_and_still_a_value_error() -> None:
    error = refused(lambda: clientconfig.consumer_config({}, "c"), ValueError)
    assert type(error) is ConfigError
    assert str(error).startswith("group.id is required")
    error = refused(lambda: clientconfig.units_group("bad name"), ValueError)
    assert type(error) is ConfigError and isinstance(error.__cause__, ValidationError)
    assert "topology name may only use" in str(error)


class _NoTopics:
    """An AdminClient of a cluster where no topic was created yet."""

    class _Metadata:
        topics: dict[str, Any] = {}

    def list_topics(self, timeout: float) -> _Metadata:
        return self._Metadata()


def test_queues_not_created_yet_are_not_ready_and_still_a_runtime_error() -> None:
    error = refused(
        lambda: clientconfig.discover_send_queues(_NoTopics(), None, "shop"), RuntimeError
    )
    assert type(error) is NotReady
    assert "run `router topics create` first" in str(error)
