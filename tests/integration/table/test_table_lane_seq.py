"""Lane order's last routed sequence number against the real Redis: the route script
records it in the group's entry ('q<n>', `Entry.routed`) whenever it writes the entry (a
new group, a final, the first call in each step of TTL / 16: `router.table.routing.
updated_at`), every other script keeps it, entries of earlier versions still route, and
`router table show` reports it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from confluent_kafka import Producer

from router.backends.redis.client import redis_client as client_for
from router.cli import cli
from router.config import load_settings
from router.contract import headers_for
from router.table import view as tableview
from router.table.routing import PARKED, STOPPED, STOPPING, RouteRequest, updated_at
from router.table.store.management import ManagementTable, TableKeys
from router.topology.side import table_for
from tests.fixtures.factories import PipelineFactory
from tests.fixtures.helpers import unique
from tests.fixtures.steering import SPEC, Landed, router_table

T0 = 1_000_000  # the route calls' clock (ms), so that entry strings are exact
STEP = 3_750  # of the TTL of 60,000 ms: an entry's update time is its last use rounded up
U0 = updated_at(T0, 60_000)  # 1,001,250


@pytest.fixture
def new_table(redis_client: redis.Redis) -> Iterator[Any]:
    made: list[ManagementTable] = []

    def make(dests: list[str], policy: str = "share") -> ManagementTable:
        keys = TableKeys.of(unique("laneseq"), "t", "send")
        t = ManagementTable(redis_client, keys, dests, policy)  # type: ignore[arg-type]
        made.append(t)
        return t

    yield make
    for t in made:
        t.drop()


def req(gid: str, offset: int, seq: int | None, final: bool = False, **kw: Any) -> RouteRequest:
    """A lane-order member from lane q/0, with `seq` as its `guarantee-seq` (None: none)."""
    token = f"q/0/{offset}" if final else ""
    return RouteRequest(
        gid, final, 60_000, token, "q/0", continuation=bool(seq), lane_seq=seq, **kw
    )


def raw(t: ManagementTable, gid: str) -> str:
    value = t.client.hget(t.keys.entries, gid)
    assert value is not None, f"no entry for {gid}"
    return value.decode("utf-8")


def test_a_lane_order_group_routed_in_two_batches_records_its_last_number(
    new_table: Any,
) -> None:
    t = new_table(["d0", "d1"])
    # batch 1: the new group's entry takes its first member's number, the next member's
    got = t.route([req("G", 0, 0), req("G", 1, 1)], now_ms=T0, batch="b1")
    assert got.decisions == ["d0", "d0"] and got.created == 1
    assert t.entry("G").routed == 1
    assert raw(t, "G") == f"d0|{T0}|{U0}|60000||q/0|open|0|-1|||1"
    # batch 2 continues on the same destination, in the same step: the entry not written
    got = t.route([req("G", 2, 2), req("G", 3, 3)], now_ms=T0 + 5, batch="b2")
    assert got.decisions == ["d0", "d0"]
    assert raw(t, "G") == f"d0|{T0}|{U0}|60000||q/0|open|0|-1|||1"
    # batch 3, in the next step: written, with the call's last number
    got = t.route([req("G", 4, 4), req("G", 5, 5)], now_ms=T0 + STEP, batch="b3")
    assert got.decisions == ["d0", "d0"]
    e = t.entry("G")
    assert (e.dest, e.lane, e.next, e.routed, e.updated_ms) == ("d0", "q/0", -1, 5, U0 + STEP)
    v = tableview.show(t, "send", "G")
    assert v is not None and v.seq_routed == 5 and v.as_json()["seq_routed"] == 5
    assert tableview.show_lines("send", "G", v)[0].endswith(", last seq routed 5")
    # the final records its number too, in any step; the release removes the entry
    assert t.route([req("G", 6, 6, final=True)], now_ms=T0 + 6, batch="b4").decisions == ["d0"]
    assert t.entry("G").routed == 6 and t.entry("G").closing == "q/0/6"
    assert t.release([("G", "q/0/6")]) == 1 and t.entry("G") is None


def test_messages_without_a_number_leave_it_unset_and_the_entry_as_before(
    new_table: Any,
) -> None:
    t = new_table(["d0", "d1"])
    assert t.route([req("P", 0, None), req("P", 1, None)], now_ms=T0).decisions == ["d0", "d0"]
    assert t.entry("P").routed is None
    assert raw(t, "P") == f"d0|{T0}|{U0}|60000||q/0"  # the entry of before
    v = tableview.show(t, "send", "P")
    assert v is not None and v.seq_routed is None
    assert "seq" not in tableview.show_lines("send", "P", v)[0]
    # a member without a number after numbered ones: once it writes the entry (the next
    # step), the last routed carried none
    t.route([req("Q", 0, 0), req("Q", 1, 1)], now_ms=T0, batch="b1")
    assert t.entry("Q").routed == 1
    t.route([req("Q", 2, None)], now_ms=T0, batch="b2")
    assert t.entry("Q").routed == 1  # the same step: not written
    t.route([req("Q", 3, None)], now_ms=T0 + STEP, batch="b3")
    assert t.entry("Q").routed is None and raw(t, "Q") == f"d1|{T0}|{U0 + STEP}|60000||q/0"


def test_a_replay_after_an_abort_records_the_last_routed_not_the_highest(
    new_table: Any,
) -> None:
    t = new_table(["d0"])
    t.route([req("G", 0, 0), req("G", 1, 1), req("G", 2, 2)], now_ms=T0, batch="b1")
    assert t.entry("G").routed == 2
    # b1 aborted after routing; its replay (in the next step: it writes the entry) routes
    # seq 1 again, then goes on
    t.route([req("G", 1, 1)], now_ms=T0 + STEP, batch="b1-replay")
    assert t.entry("G").routed == 1
    t.route([req("G", 2, 2), req("G", 3, 3)], now_ms=T0 + 2 * STEP, batch="b2")
    assert t.entry("G").routed == 3


def test_members_that_are_not_routed_straight_record_nothing(new_table: Any) -> None:
    t = new_table(["d0"], policy="wait")
    assert t.route([req("A", 0, 0)], now_ms=T0, batch="b1").decisions == ["d0"]
    # B waits in the room for the only destination: parked, not routed straight
    assert t.route([req("B", 1, 0)], now_ms=T0, batch="b2").decisions == ["!w"]
    assert t.entry("B").routed is None and t.entry("B").state == "waiting"
    assert t.entry("A").routed == 0


def test_the_other_scripts_keep_the_number(new_table: Any) -> None:
    t = new_table(["d0", "d1"])
    t.route([req("S", 0, 0), req("S", 1, 1)], now_ms=T0, batch="b1")
    # a poison message stops the group (settle.lua rewrites the entry without a destination)
    got = t.route([req("S", 2, 2, poison_stop=True)], now_ms=T0, batch="b2")
    assert got.decisions == [STOPPING + "d0"]
    assert t.settle("b2", [], [("S", STOPPED)]) == 0
    e = t.entry("S")
    assert (e.dest, e.closing, e.routed) == ("!", STOPPED, 1)
    assert t.route([req("S", 3, 3)], now_ms=T0, batch="b3").decisions == [PARKED]
    assert t.entry("S").routed == 1
    # a waiting entry that carries a number (admit in prelude.lua, via settle.lua)
    t.client.hset(t.keys.entries, "W", f"!|{T0}|{T0}|60000||q/1|waiting|1|-1|||7")
    t.client.zadd(t.keys.room, {"W": T0})
    t.settle("b9", [])
    w = t.entry("W")
    assert (w.state, w.parks, w.routed) == ("admitted", 1, 7) and w.dest in ("d0", "d1")
    # a pinned entry (pin.lua) takes its first member's number
    assert t.pin("P", "d1", 60_000, now_ms=T0)
    assert t.entry("P").routed is None
    assert t.route([req("P", 4, 0)], now_ms=T0, batch="b4").decisions == ["d1"]
    assert t.entry("P").routed == 0 and t.entry("P").state == "open"


def test_entries_of_earlier_versions_still_route(new_table: Any) -> None:
    t = new_table(["d0", "d1"])
    c, k = t.client, t.keys
    c.hset(k.entries, "L", f"d1|{T0}|{T0}|60000||q/0")  # lane order, before this field
    c.hset(k.entries, "O", f"d0|{T0}|{T0}|60000|")  # before lanes
    c.hset(k.entries, "X", f"d0|{T0}|{T0}|60000||q/0|open|0|2|q/0/5")  # logical, no origin
    c.hset(k.load, mapping={"d0": 2, "d1": 1})
    got = t.route(
        [
            req("L", 10, 5),
            req("O", 11, 6),
            RouteRequest("X", False, 60_000, "q/0/12", "q/0", continuation=True, seq=2),
        ],
        now_ms=T0 + 1,
    )
    assert got.decisions == ["d1", "d0", "d0"] and got.created == 0
    assert raw(t, "L") == f"d1|{T0}|{U0}|60000||q/0|open|0|-1|||5"
    assert t.entry("O").lane == "q/0" and t.entry("O").routed == 6
    x = t.entry("X")  # logical order: its next number says it, nothing else recorded
    assert (x.next, x.fence, x.routed) == (3, "q/0/12", None)


def test_table_show_reports_a_lane_order_groups_number(redis_url: str) -> None:
    env: dict[str, str | None] = {
        "ROUTER_CONFIG": None,
        "ROUTER_REDIS__URL": redis_url,
        "ROUTER_REDIS__KEY_PREFIX": unique("cli"),
        "ROUTER_TOPOLOGY__NAME": unique("topo"),
        "ROUTER_ROUTING__DEFAULT_TTL_MS": "60000",
    }
    s = load_settings(
        None,
        redis={"url": redis_url, "key_prefix": env["ROUTER_REDIS__KEY_PREFIX"]},
        topology={"name": env["ROUTER_TOPOLOGY__NAME"]},
        routing={"default_ttl_ms": 60000},
    )
    send = table_for(s, "send", client_for(s.redis))
    try:
        send.route([req("G", 0, 0), req("G", 1, 1)], batch=unique("b"))
        send.route([req("G", 2, 2, final=True)], batch=unique("b"))  # a final writes it
        send.route([req("N", 3, None)], batch=unique("b"))
        runner = CliRunner()
        shown = runner.invoke(cli, ["table", "show", "G", "--json"], env=env)
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["send"]["seq_routed"] == 2
        text = runner.invoke(cli, ["table", "show", "G"], env=env).stdout
        assert "last seq routed 2" in text
        none = json.loads(runner.invoke(cli, ["table", "show", "N", "--json"], env=env).stdout)
        assert none["send"]["seq_routed"] is None
    finally:
        for side in ("send", "receive"):
            table_for(s, side, client_for(s.redis)).drop()  # type: ignore[arg-type]


def test_running_units_record_a_lane_order_groups_number_on_both_sides(
    pipeline: PipelineFactory,
) -> None:
    """End to end: the send and receive units' route steps pass the `guarantee-seq` of
    lane-order members (a plain producer's headers) to their tables. A group's first
    member writes its entry; a later one within the same step of its TTL need not (the
    table tests above pin that down with their own clock), so G's number is 0 or 1."""
    p = pipeline(SPEC)
    (queue,) = p.settings.topology.send_queues
    producer = Producer({"bootstrap.servers": p.settings.kafka.bootstrap_servers})
    landed = Landed(p)
    producer.produce(queue, b"g-0", partition=0, headers=headers_for("G", seq=0))
    producer.flush(10)
    landed.until([b"g-0"])
    shown = router_table(p, "show", "G")
    assert shown["send"]["seq_routed"] == 0 and shown["receive"]["seq_routed"] == 0
    for value, gid, seq in ((b"g-1", "G", 1), (b"n-0", "N", None)):
        producer.produce(queue, value, partition=0, headers=headers_for(gid, seq=seq))
    producer.flush(10)
    landed.until([b"g-1", b"n-0"])
    shown = router_table(p, "show", "G")
    assert shown["send"]["seq_routed"] in (0, 1) and shown["receive"]["seq_routed"] in (0, 1)
    assert shown["send"]["state"] == "open" == shown["receive"]["state"]
    plain = router_table(p, "show", "N")
    assert plain["send"]["seq_routed"] is None and plain["receive"]["seq_routed"] is None
    landed.consumer.close()
