"""`router table ...` against real Redis (no unit processes): the steering commands'
plans, --yes, --json and refusals, and what they change in the table the route script
reads. Where messages land with a running pipeline: `test_steering.py`."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from router.backends.redis.client import redis_client
from router.cli import cli
from router.cli.table import NOT_CONFIRMED
from router.config import load_settings
from router.table import room
from router.table.routing import RouteRequest
from router.table.store.management import ManagementTable
from router.topology.side import table_for
from tests.fixtures.helpers import unique

Run = Callable[..., Result]


@pytest.fixture
def env(redis_url: str) -> Iterator[dict[str, str | None]]:
    """A topology of its own: send side destinations 0, 1, 2; receive side two queues."""
    e: dict[str, str | None] = {
        "ROUTER_CONFIG": None,
        "ROUTER_REDIS__URL": redis_url,
        "ROUTER_REDIS__KEY_PREFIX": unique("cli"),
        "ROUTER_TOPOLOGY__NAME": unique("topo"),
        "ROUTER_TOPOLOGY__RECEIVE_UNITS": "3",
        "ROUTER_TOPOLOGY__RECEIVE_QUEUE_COUNT": "2",
        "ROUTER_ROUTING__DEFAULT_TTL_MS": "60000",
    }
    yield e
    s = _settings(e)
    for side in ("send", "receive"):
        table_for(s, side, redis_client(s.redis)).drop()  # type: ignore[arg-type]


def _settings(env: dict[str, str | None]) -> Any:
    return load_settings(
        None,
        redis={"url": env["ROUTER_REDIS__URL"], "key_prefix": env["ROUTER_REDIS__KEY_PREFIX"]},
        topology={"name": env["ROUTER_TOPOLOGY__NAME"], "receive_units": 3},
        routing={"default_ttl_ms": 60000},
    )


@pytest.fixture
def run(env: dict[str, str | None]) -> Run:
    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli, ["table", *args], env=env, catch_exceptions=False)

    return invoke


@pytest.fixture
def send(env: dict[str, str | None]) -> ManagementTable:
    s = _settings(env)
    return table_for(s, "send", redis_client(s.redis))


def route(t: ManagementTable, gid: str | None, final: bool = False, lane: str = "q/0") -> str:
    n = unique("o").split("-")[1]
    r = RouteRequest(gid, final, 60_000, f"{lane}/{int(n, 16)}", lane)
    return t.route([r], batch=unique("b")).decisions[0]


def out_json(result: Result) -> Any:
    return json.loads(result.stdout)


def test_list_and_show_give_json_for_both_sides(run: Run, send: ManagementTable) -> None:
    dest = route(send, "G")
    listed = out_json(run("list", "--json"))
    assert set(listed) == {"send", "receive"}
    (entry,) = listed["send"]["entries"]
    assert entry["guarantee_id"] == "G" and entry["destination"] == dest
    assert entry["state"] == "open" and entry["lane"] == "q/0" and entry["room"] is None
    assert listed["send"]["load"] == {dest: 1} and listed["receive"]["entries"] == []
    closing = out_json(run("list", "--side", "send", "--state", "closing", "--json"))
    assert set(closing) == {"send"} and closing["send"]["entries"] == []
    on = out_json(run("list", "--side", "send", "--destination", dest, "--json"))
    assert [e["guarantee_id"] for e in on["send"]["entries"]] == ["G"]
    elsewhere = out_json(run("list", "--destination", "nowhere", "--json"))
    assert elsewhere["send"]["entries"] == [] == elsewhere["receive"]["entries"]
    shown = run("show", "G", "--json")
    assert shown.exit_code == 0
    data = out_json(shown)
    assert data["receive"] is None and data["send"]["destination"] == dest
    assert data["send"]["ttl_s"] == 60.0 and data["send"]["age_s"] >= 0
    text = run("show", "G").stdout
    assert f"send: open on {dest}" in text and "receive: no entry for 'G'" in text
    missing = run("show", "nope", "--json")
    assert missing.exit_code == 1 and out_json(missing) == {"send": None, "receive": None}
    # the text listing keeps what `table show --side` printed before `show` took an ID
    text = run("list", "--side", "send").stdout
    assert "send table of topology" in text and "1 open groups" in text
    assert any(line.startswith("G ") and line.endswith("open") for line in text.splitlines())
    assert "draining: -" in text and "waiting room: 0 waiting" in text


def test_pin_needs_yes_refuses_bad_targets_and_routes_the_first_message_there(
    run: Run, send: ManagementTable
) -> None:
    plan = run("pin", "P", "2", "--side", "send", "--json")
    assert plan.exit_code == NOT_CONFIRMED
    assert out_json(plan)["applied"] is False and out_json(plan)["plan"]["action"] == "pin"
    assert send.entry("P") is None and send.loads() == {}
    text = run("pin", "P", "2", "--side", "send")
    assert text.exit_code == NOT_CONFIRMED and "will: create a pinned entry" in text.stdout
    assert "add --yes" in text.stderr and send.entry("P") is None

    bad = run("pin", "P", "7", "--side", "send", "--yes", "--json")
    assert bad.exit_code == 1 and "not a destination" in out_json(bad)["error"]
    assert send.entry("P") is None

    done = run("pin", "P", "2", "--side", "send", "--yes", "--json")
    assert done.exit_code == 0, done.output
    assert out_json(done)["entry"]["state"] == "pinned"
    assert out_json(done)["entry"]["destination"] == "2"
    assert send.loads() == {"2": 1}  # it holds its destination from now
    again = run("pin", "P", "1", "--side", "send", "--yes")
    assert again.exit_code == 1 and "already has an entry" in again.output
    route(send, "X")  # a new group is not placed on the pinned destination
    assert send.entry("X") is not None and send.entry("X").dest != "2"  # type: ignore[union-attr]
    assert route(send, "P", lane="q/5") == "2"  # the first message goes where pinned
    entry = send.entry("P")
    assert entry is not None and (entry.state, entry.lane, entry.dest) == ("open", "q/5", "2")
    assert send.loads()["2"] == 1  # counted once
    assert out_json(run("show", "P", "--side", "send", "--json"))["send"]["state"] == "open"
    existing = run("pin", "X", "0", "--side", "send", "--yes")
    assert existing.exit_code == 1 and "already has an entry" in existing.output


def test_drain_keeps_new_groups_off_and_waits_for_the_open_ones(
    run: Run, send: ManagementTable
) -> None:
    dest = route(send, "OPEN")
    plan = run("drain", dest, "--side", "send", "--json")
    assert plan.exit_code == NOT_CONFIRMED and send.draining() == set()
    assert out_json(plan)["plan"]["groups"] == ["OPEN"]
    bad = run("drain", "9", "--side", "send", "--yes")
    assert bad.exit_code == 1 and "not a destination" in bad.output
    timed_out = run("drain", dest, "--side", "send", "--yes", "--wait", "--timeout", "0.3")
    assert timed_out.exit_code == 1 and "1 open group(s)" in timed_out.output
    assert send.draining() == {dest}
    for i in range(6):  # new groups and ordinary messages go elsewhere
        assert route(send, f"N{i}") != dest
        assert route(send, None) != dest
    assert route(send, "OPEN") == dest  # the open group continues there
    route(send, "OPEN", final=True)
    entry = send.entry("OPEN")
    assert entry is not None
    send.release([("OPEN", entry.closing)])
    done = run("drain", dest, "--side", "send", "--yes", "--wait", "--timeout", "30", "--json")
    assert done.exit_code == 0, done.output
    assert out_json(done)["status"]["idle"] is True
    undrain = run("undrain", dest, "--side", "send", "--json")
    assert undrain.exit_code == NOT_CONFIRMED and send.draining() == {dest}
    undrain = run("undrain", dest, "--side", "send", "--yes", "--json")
    assert undrain.exit_code == 0 and out_json(undrain)["was_draining"] is True
    assert send.draining() == set()


def test_draining_every_destination_warns_and_drains_none(run: Run, send: ManagementTable) -> None:
    for d in ("0", "1"):
        assert run("drain", d, "--side", "send", "--yes").exit_code == 0
    last = run("drain", "2", "--side", "send", "--json")
    assert any("every destination" in w for w in out_json(last)["plan"]["warnings"])
    assert run("drain", "2", "--side", "send", "--yes").exit_code == 0
    placed = {route(send, f"G{i}") for i in range(3)}
    assert placed == {"0", "1", "2"}  # treated as none draining: nothing stops
    assert send.stats().get("drain_ignored", 0) >= 3


def test_evict_and_release_remove_entries_only_with_yes(run: Run, send: ManagementTable) -> None:
    placed = {g: route(send, g) for g in ("A", "B", "C", "D")}
    dest = placed["A"]
    on = sorted(g for g, d in placed.items() if d == dest)
    assert placed["D"] == room.WAIT  # three destinations, each in charge of a group
    plan = run("evict", dest, "--side", "send")
    assert plan.exit_code == NOT_CONFIRMED and "start new assignments" in plan.stdout
    assert set(send.entries()) == set(placed)
    done = run("evict", dest, "--side", "send", "--yes", "--json")
    assert done.exit_code == 0 and out_json(done)["released"] == len(on)
    assert set(send.entries()) == set(placed) - set(on)
    # what was on it is gone; the destination went to the group that waited (policy wait)
    assert send.admitted() == {"D": dest} and send.loads()[dest] == 1
    other = next(g for g in placed if g not in on)
    assert run("release", "--side", "send", other).exit_code == NOT_CONFIRMED
    assert send.entry(other) is not None
    released = run("release", "--side", "send", other, "--yes", "--json")
    assert out_json(released)["released"] == 1 and send.entry(other) is None
    missing = run("release", "--side", "send", "nope", "--yes")
    assert missing.exit_code == 1 and "no entry" in missing.output
