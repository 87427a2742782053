"""The client libraries explain themselves: every public name of their modules has a
docstring that `help()` shows, and type hints on every parameter and return (pure)."""

from __future__ import annotations

import inspect
import pydoc
import typing
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from router.config import client as clientconfig
from router.contract import request as sendrequest
from router.receiver import client as receiver
from router.receiver import received
from router.sender import backlog, tailprobe
from router.sender import client as sender
from router.sender import groups as sendgroups
from router.sender import journal as senderjournal
from router.state import groups as groupstatus
from router.state import sender as senderstate
from router.state import store as statestore

MODULES = [
    sender,
    receiver,
    received,
    sendgroups,
    sendrequest,
    clientconfig,
    backlog,
    senderstate,
    senderjournal,
    statestore,
    groupstatus,
    tailprobe,
]


def public(module: ModuleType) -> Iterator[tuple[str, Any]]:
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            yield name, obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr not in ("__init__", "__enter__", "__exit__"):
                        continue
                    func = member.__func__ if isinstance(member, classmethod) else member
                    if inspect.isfunction(func) or isinstance(func, property):
                        yield f"{name}.{attr}", func


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_public_name_has_a_docstring_and_type_hints(module: ModuleType) -> None:
    assert module.__doc__, module.__name__
    undocumented, unhinted = [], []
    for name, obj in public(module):
        if name.endswith(("__enter__",)):
            continue
        doc = inspect.getdoc(obj) or ""
        if not doc or (inspect.isclass(obj) and doc.startswith(f"{obj.__name__}(")):
            undocumented.append(name)  # none, or only the one @dataclass makes up
        func = obj.fget if isinstance(obj, property) else obj
        if inspect.isfunction(func):
            hints = typing.get_type_hints(func)
            params = [p for p in inspect.signature(func).parameters if p not in ("self", "cls")]
            missing = [p for p in [*params, "return"] if p not in hints]
            if missing:
                unhinted.append(f"{name}: {missing}")
    assert not undocumented, f"no docstring: {undocumented}"
    assert not unhinted, f"no type hints: {unhinted}"


def test_help_shows_how_to_build_the_clients_like_confluent_kafkas() -> None:
    text = pydoc.plain(pydoc.render_doc(sender.Sender))
    assert 'Sender({"bootstrap.servers": "127.0.0.1:9092"}, "shop")' in text
    assert "from_settings" in text
    text = pydoc.plain(pydoc.render_doc(receiver.Receiver))
    assert "consume(self, num_messages: 'int' = 500, timeout: 'float' = 1.0)" in text
    assert "on_revoke" in text
