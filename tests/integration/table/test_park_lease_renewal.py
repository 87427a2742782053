"""A batch that parks messages in the waiting room renews its park leases like its in-flight
ones (`router/table/store/lua/lease.lua`): a park lease that lapsed while the batch waited
to be produced lets the drain open (or release) its group before the parked record is on
the broker, and the record then arrived for a group already open or gone (seen in chaos
runs after a broker restart: dead letters `group-entry-missing` for a lane's ordinary
messages). Real Redis."""

from __future__ import annotations

import redis

from router.table import room
from router.table.routing import RouteRequest
from router.topology.side import table_for
from tests.fixtures.factories import TopologyFactory


def test_park_leases_are_renewed_all_together_and_a_lapsed_one_is_reported(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    s = topology(topology={"receive_units": 1})
    lane = f"{s.topology.send_queues[0]}/0"
    table = table_for(s, "send", redis_client)
    now = table.now_ms() - 1_000  # routed a second ago: a renewal (Redis clock) is later

    def request(gid: str | None, offset: int) -> RouteRequest:
        return RouteRequest(gid, False, 600_000, f"{lane}/{offset}", lane)

    assert table.route([request("g1", 0)], now_ms=now, batch="b0").decisions == ["0"]
    parked = table.route([request("g2", 1), request(None, 2)], now_ms=now, batch="b1")
    assert parked.decisions == [room.WAIT, room.WAIT]
    before = table.park_leases()
    assert set(before) == {("g2", "b1"), (f"~{lane}", "b1")}

    assert table.renew("b1", [], parked=True)
    after = table.park_leases()
    assert set(after) == set(before) and all(after[k] > before[k] for k in before)
    assert table.renew("b0", [], parked=False)  # nothing parked, nothing in flight: kept

    # b1's park leases lapse and a route call ends them: the batch must not be produced
    table.route([request("g3", 3)], now_ms=max(after.values()) + 1, batch="b2")
    assert ("g2", "b1") not in table.park_leases()
    assert not table.renew("b1", [], parked=True)
