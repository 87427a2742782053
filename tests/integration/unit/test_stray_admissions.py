"""An admitted group of which the room holds no record (CI, the short streamed chaos run under
`wait`, one copy lost): the drain step must still open it, or it holds its destination
until its TTL and everything that can only go there waits behind it.

A batch that parks messages counts their parks in the table at its route call; if its
transaction aborts, the table keeps the count (its replay, recognised by the parked
position, counts nothing twice). But the replay need not park them again: an ordinary
message whose destinations are no longer all busy goes straight (the lane's pseudo-group
'~<lane>' only gathers ordinary messages that found none free), and a member whose
lifetime ended meanwhile is expired, not routed. The room then holds no record of the group,
yet it is admitted to a destination once one frees, and the drain step only ever asked the
table about groups it had records, markers or checks of. In the CI run the receive side's
'~<transfer partition>' was admitted to one receive queue with 7 parks and no record, and a
multicast copy that could only go to that queue waited behind it until the run ended.

In-process send unit against the real broker and Redis: one send-queue partition, one
destination, one room partition."""

from __future__ import annotations

import redis

from router.contract import headers_for
from router.table import room
from router.topology.side import table_for
from tests.fixtures.factories import TopologyFactory
from tests.fixtures.inprocess import read_records, room_unit, send, step_until, stop
from tests.fixtures.strays import one_lane, park_and_abort


def test_an_admitted_group_with_no_record_in_the_room_is_opened_by_the_drain(
    topology: TopologyFactory, redis_client: redis.Redis
) -> None:
    s = one_lane(topology)
    q, boot = s.topology.send_queues[0], s.kafka.bootstrap_servers
    lane = f"{q}/0"
    table = table_for(s, "send", redis_client)
    unit = room_unit(s)
    try:
        send(boot, q, [(0, b"A0", headers_for("A", seq=0))])
        step_until(unit, lambda: "A" in table.entries(), 60, "A open")
        park_and_abort(table, lane)  # the only destination is A's
        pseudo = room.ordinary_group(lane)
        assert table.entries()[pseudo].parks == 1
        # A's final frees the destination: the pseudo-group, first in the room, is admitted
        # to it. C comes after and must wait behind it, its records parked in the room.
        send(boot, q, [(0, b"A1", headers_for("A", seq=1, final=True))])
        step_until(unit, lambda: table.admitted() == {pseudo: "0"}, 60, "the pseudo-group admitted")
        send(boot, q, [
            (0, b"C0", headers_for("C", seq=0)),
            (0, b"C1", headers_for("C", seq=1, final=True)),
        ])  # fmt: skip

        def delivered() -> list[bytes | None]:
            return [v for v, _ in read_records(boot, s.topology.transfer_topic) if v is not None]

        step_until(unit, lambda: b"C1" in delivered(), 60, "C delivered behind the pseudo-group")
        assert delivered() == [b"A0", b"A1", b"C0", b"C1"]
        assert pseudo not in table.entries()  # released: it held its destination for nothing
        assert unit.metrics.get("room_strays") >= 1
    finally:
        stop(unit)
