"""The waiting-room stall (short chaos runs, policy `wait`): leases of batches that never
settle end at their expiry even when nothing is routed any more.

A unit that routed a batch and died before settling it (SIGKILL, a fault injected after
route), or whose transaction failed (its batch replayed under another ID), leaves its
in-flight leases (ordinary messages) and park leases (messages parked in the room) in the
table until they expire. Only a route call ended expired leases. Once the senders stopped
and every source was read, nothing was routed any more, so they stayed: every
destination fenced by one stayed unclean and no waiting group was admitted to it (CI's
short chaos run with one band: 427 groups waiting, no destination in charge of a group,
all three fenced by the leases of a receive unit killed after route), and an admitted
group with one could never open. The groups waited until routing.max_wait_ms (120 s),
then were shared: interleaved. The sweeper now ends them every round.
"""

from __future__ import annotations

import redis

from router.sweeper.loop import Sweeper
from router.table import room
from router.table.routing import RouteRequest
from router.topology.side import table_for
from tests.fixtures.factories import TopologyFactory


def test_the_sweeper_ends_a_dead_batchs_leases_when_nothing_is_routed_any_more(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    s = topology(topology={"receive_units": 2}, routing={"busy_policy": "wait"})
    lane = f"{s.topology.send_queues[0]}/0"
    table = table_for(s, "send", redis_client)
    assert len(table.destinations) == 2
    # 30 s ago (past the 15 s lease, within routing.max_wait_ms), on the Redis clock:
    # two batches routed an ordinary message each, one to each destination, and their
    # units died before settling them; then groups g1 and g2 found no clean destination.
    t0 = table.now_ms() - 30_000

    def request(gid: str | None, offset: int, on: str = lane) -> RouteRequest:
        return RouteRequest(gid, False, 600_000, f"{on}/{offset}", on)

    # one from each of two lanes: each lane's ordinary messages prefer its home destination
    dead = [
        table.route(
            [request(None, i, f"{s.topology.send_queues[0]}/{i}")], now_ms=t0, batch=f"dead{i}"
        )
        for i in range(2)
    ]
    assert {r.decisions[0] for r in dead} == set(table.destinations)
    waiting = table.route([request("g1", 2), request("g2", 3)], now_ms=t0 + 1, batch="b1")
    assert waiting.decisions == [room.WAIT, room.WAIT]
    table.settle("b1", [], [])
    # The stuck state: no destination in charge of a group, both fenced by leases that
    # ended long ago, and a release (any settle) admits nothing.
    table.release([("nobody", "*")])
    assert table.loads() == {} and set(table.room()) == {"g1", "g2"}
    assert len(table.inflight()) == 2

    sweeper = Sweeper(s, redis_client=redis_client)
    report = sweeper.run_once()
    assert report.leases_ended == 2 and report.wait_timeouts == 0
    assert table.inflight() == {} and table.room() == {}
    assert table.admitted() == dict(zip(["g1", "g2"], table.destinations, strict=True))

    # An admitted group with a park lease of a batch that failed (aborted, replayed as
    # another batch): the drain step saw it as a park in flight and never opened it.
    parked = table.route([request("g1", 4)], now_ms=t0 + 2, batch="failed")
    assert parked.decisions == [room.WAIT]
    parks = table.entries()["g1"].parks
    assert table.room_state(["g1"])["g1"].leased
    table.settle("drain1", [], [], drains=[("g1", parks)])
    assert table.entries()["g1"].state == room.ADMITTED  # a park in flight: stays shut
    assert sweeper.run_once().leases_ended == 1
    assert not table.room_state(["g1"])["g1"].leased
    table.settle("drain2", [], [], drains=[("g1", parks)])
    assert table.entries()["g1"].state == room.OPEN
    assert table.stats().get("shared", 0) == 0
