"""`router table ... --cell` against real Redis, a topology of three cells (issue 30, item 3;
docs/explanation/cells.md): a pin lands in its destination's cell's table, `list` names every
cell's tables and `--cell` one, `show` finds a group in its cell, `release` acts on the cell
holding the group."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from router.backends.redis.client import redis_client
from router.cli import cli
from router.config import load_settings
from router.topology.side import table_for
from tests.fixtures.helpers import unique


@pytest.fixture
def env(redis_url: str) -> Iterator[dict[str, str | None]]:
    e: dict[str, str | None] = {
        "ROUTER_CONFIG": None,
        "ROUTER_REDIS__URL": redis_url,
        "ROUTER_REDIS__KEY_PREFIX": unique("cli"),
        "ROUTER_TOPOLOGY__NAME": unique("topo"),
        "ROUTER_TOPOLOGY__CELLS": "3",
        "ROUTER_TOPOLOGY__SEND_QUEUE_PARTITIONS": "3",
        "ROUTER_TOPOLOGY__RECEIVE_UNITS": "6",
        "ROUTER_TOPOLOGY__RECEIVE_QUEUE_COUNT": "3",
    }
    yield e
    s = settings(e)
    client = redis_client(s.redis)
    for side in ("send", "receive"):
        for cell in range(3):
            table_for(s, side, client, cell).drop()  # type: ignore[arg-type]


def settings(env: dict[str, str | None]) -> Any:
    return load_settings(
        None,
        redis={"url": env["ROUTER_REDIS__URL"], "key_prefix": env["ROUTER_REDIS__KEY_PREFIX"]},
        topology={
            "name": env["ROUTER_TOPOLOGY__NAME"],
            "cells": 3,
            "send_queue_partitions": 3,
            "receive_units": 6,
            "receive_queue_count": 3,
        },
    )


def run(env: dict[str, str | None], *args: str) -> Result:
    return CliRunner().invoke(cli, ["table", *args], env=env, catch_exceptions=False)


def test_table_commands_find_each_cells_table(env: dict[str, str | None]) -> None:
    s = settings(env)
    client = redis_client(s.redis)
    tables = [table_for(s, "send", client, c) for c in range(3)]
    pinned = run(env, "pin", "P", "4", "--side", "send", "--yes", "--json")
    assert pinned.exit_code == 0, pinned.output
    assert [t.entry("P") is not None for t in tables] == [False, True, False]  # 4 mod 3 = 1

    listed = json.loads(run(env, "list", "--side", "send", "--json").stdout)
    assert sorted(listed) == ["send/0", "send/1", "send/2"]
    assert [len(listed[f"send/{c}"]["entries"]) for c in range(3)] == [0, 1, 0]
    one = json.loads(run(env, "list", "--side", "send", "--cell", "2", "--json").stdout)
    assert list(one) == ["send/2"] and one["send/2"]["entries"] == []
    text = run(env, "list", "--side", "send").stdout
    assert f"{s.topology.name} cell 1" in text

    shown = json.loads(run(env, "show", "P", "--side", "send", "--json").stdout)
    assert shown["send/0"] is None and shown["send/2"] is None
    assert shown["send/1"]["destination"] == "4"

    wrong = run(env, "pin", "Q", "4", "--side", "send", "--cell", "0", "--yes", "--json")
    assert wrong.exit_code == 1 and "not a destination" in json.loads(wrong.stdout)["error"]

    released = run(env, "release", "--side", "send", "P", "--yes", "--json")
    assert released.exit_code == 0, released.output
    assert json.loads(released.stdout)["released"] == 1
    assert all(t.entry("P") is None for t in tables)
