"""A caller's memory of its groups (`router.table.store.memory`) changes no decision and no
table state, on random histories against the real Lua.

Two tables in one Redis take the same history: in table A the units remember their groups
(the default), in table B they send every message. After every step, each call's
decisions (or its refusal) and the whole table (entries, deadlines, loads, closing marks,
the room, the stats) must be the same. The history mixes what can change a remembered
entry unseen: finals settled, an operator's release and eviction, sweeps, the clock moving
on (steps of the TTL) and back (past sweeps), a zombie's claim of a lane and its calls, the
table lost, and lanes held in a call (an ID reused on another lane).
"""

from __future__ import annotations

from typing import Any

import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from router.table.routing import RouteRequest
from router.table.store.management import ManagementTable, TableKeys
from router.table.store.owners import LaneFenced
from tests.fixtures.helpers import unique

GIDS = ["g1", "g2", "g3", "g4"]
LANES = ["q/0", "q/1"]
OWNER = {"q/0": "u1", "q/1": "u2"}
TTLS = [16_000, 160_000]  # steps of 1,000 and 10,000 ms
DECIDED: list[int] = []  # messages decided from memory, per run (the test checks it is used)

# (gid, kind, numbered, ttl): kind 0 a first member, 1-7 a plain member, 8 a final, 9 a
# dead-lettered member; gid None an ordinary message. Both units use the same IDs, so a
# group may be open on the other unit's lane (the script answers !x or !h).
message = st.tuples(
    st.one_of(st.none(), st.sampled_from(GIDS), st.sampled_from(GIDS), st.sampled_from(GIDS)),
    st.integers(0, 9),
    st.booleans(),  # with a lane-order number (recorded only)
    st.integers(0, 9).map(lambda n: TTLS[1] if n == 0 else TTLS[0]),
)


def tables_equal(a: ManagementTable, b: ManagementTable) -> None:
    r: Any = a.client
    for name in ("entries", "load", "stats", "admitted"):
        ka, kb = getattr(a.keys, name), getattr(b.keys, name)
        got = [r.hgetall(k) for k in (ka, kb)]
        got[0].pop(b"remembered", None)  # (counts what the memory decided)
        assert got[0] == got[1], name
    for name in ("deadlines", "closing", "room", "inflight"):
        ka, kb = getattr(a.keys, name), getattr(b.keys, name)
        assert r.zrange(ka, 0, -1, withscores=True) == r.zrange(kb, 0, -1, withscores=True), name
    assert r.get(a.keys.cursor) == r.get(b.keys.cursor)


def make_machine(redis_url: str) -> type[RuleBasedStateMachine]:
    client = redis.Redis.from_url(redis_url)

    class MemoryMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.now = 1_000_000_000
            self.offset = 0
            self.times: list[int] = []  # the times of the calls so far
            self.pairs: dict[str, tuple[ManagementTable, ManagementTable]] = {}
            self.finals: list[tuple[str, str]] = []  # routed finals, not settled yet
            self.batches: list[tuple[str, list[str]]] = []  # unsettled: ID, ordinary dests

        @initialize(policy=st.sampled_from(["share", "wait"]), ndest=st.integers(1, 3))
        def setup(self, policy: str, ndest: int) -> None:
            dests = [f"d{i}" for i in range(ndest)]
            keys = {s: TableKeys.of(unique("mem"), "t", "send") for s in "ab"}
            for unit in ("u1", "u2", "z"):
                self.pairs[unit] = (
                    ManagementTable(client, keys["a"], dests, policy, 3_000),  # type: ignore[arg-type]
                    ManagementTable(client, keys["b"], dests, policy, 3_000, remember=False),  # type: ignore[arg-type]
                )
            for lane, unit in OWNER.items():
                self._claim(unit, lane)
            self.dests = dests

        def teardown(self) -> None:
            if self.pairs:
                a, b = self.pairs["u1"]
                DECIDED.append(sum(p[0].memory.decided for p in self.pairs.values() if p[0].memory))
                a.drop()
                b.drop()

        def _claim(self, unit: str, lane: str) -> None:
            for t in self.pairs[unit]:
                t.claim([lane])

        def _call(self, unit: str, requests: list[RouteRequest], batch: str) -> None:
            self.times.append(self.now)
            got = []
            for t in self.pairs[unit]:
                try:
                    got.append(t.route(requests, now_ms=self.now, batch=batch).decisions)
                except LaneFenced as exc:
                    got.append(["fenced", exc.lane])
            assert got[0] == got[1], f"{requests}: memory {got[0]} != without {got[1]}"
            if got[0][0] != "fenced":
                ordinary = sorted(
                    {d for r, d in zip(requests, got[0], strict=True) if r.guarantee_id is None}
                )
                self.batches.append((batch, [d for d in ordinary if d in self.dests]))
                for r, d in zip(requests, got[0], strict=True):
                    if r.final and r.guarantee_id is not None and d in self.dests:
                        self.finals.append((r.guarantee_id, r.token))

        @rule(
            unit=st.sampled_from(["u1", "u2"]),
            batches=st.lists(st.lists(message, min_size=1, max_size=10), min_size=1, max_size=4),
        )
        def route(self, unit: str, batches: list[list[tuple[Any, int, bool, int]]]) -> None:
            for batch in batches:
                self._route(unit, batch)

        def _route(self, unit: str, batch: list[tuple[Any, int, bool, int]]) -> None:
            lane = next(lane for lane, u in OWNER.items() if u == unit)
            requests = []
            for gid, kind, numbered, ttl in batch:
                self.offset += 1
                requests.append(
                    RouteRequest(
                        gid,
                        gid is not None and kind == 8,
                        ttl,
                        f"{lane}/{self.offset}",
                        lane,
                        dead=gid is not None and kind == 9,
                        continuation=gid is not None and kind > 0,
                        lane_seq=self.offset if gid is not None and numbered else None,
                    )
                )
            self._call(unit, requests, f"b{self.offset}")

        @rule(unit=st.sampled_from(["u1", "u2"]), gid=st.sampled_from(GIDS))
        def reused_on_the_other_lane(self, unit: str, gid: str) -> None:
            """A first message on this unit's lane for a group open on the other lane: held
            (`!h`), and the lane's later members skipped."""
            own = next(lane for lane, u in OWNER.items() if u == unit)
            self.offset += 1
            first = RouteRequest(gid, False, TTLS[0], f"{own}/{self.offset}", own)
            later = [
                RouteRequest(g, False, TTLS[0], f"{own}/{self.offset}{i}", own, continuation=True)
                for i, g in enumerate(GIDS)
            ]
            self._call(unit, [first, *later], f"h{self.offset}")

        @rule(data=st.data())
        def settle(self, data: st.DataObject) -> None:
            if not self.batches and not self.finals:
                return
            finals = (
                data.draw(st.lists(st.sampled_from(self.finals), max_size=3)) if self.finals else []
            )
            batch, dests = self.batches.pop(0) if self.batches else ("", [])
            got = [t.settle(batch, dests, finals) for t in self.pairs["u1"]]
            assert got[0] == got[1]
            self.finals = [f for f in self.finals if f not in finals]

        @rule(gid=st.sampled_from(GIDS), evict=st.booleans())
        def operator(self, gid: str, evict: bool) -> None:
            a, b = self.pairs["u1"]
            e = a.entry(gid)
            token = "*" if not evict or e is None else "@" + e.dest
            assert a.release([(gid, token)]) == b.release([(gid, token)])

        @rule(ms=st.sampled_from([1, 40, 99, 100, 700, 1, 40, 700, 1_000, 20_000, -150, -12_000]))
        def clock(self, ms: int) -> None:
            self.now += ms

        @rule(data=st.data())
        def clock_back(self, data: st.DataObject) -> None:
            """Redis's clock back to the time of an earlier call (a failover, a clock step),
            past sweeps made in between."""
            if self.times:
                self.now = data.draw(st.sampled_from(self.times))

        @rule(limit=st.integers(1, 4))
        def sweep(self, limit: int) -> None:
            got = [
                [s.guarantee_id for s in t.sweep(limit, self.now, self.now)]
                for t in self.pairs["u1"]
            ]
            assert got[0] == got[1]

        @rule(lane=st.sampled_from(LANES), data=st.data())
        def zombie(self, lane: str, data: st.DataObject) -> None:
            """Another unit claims the lane, routes a batch there, and the owner claims it back
            (its first call in between is refused: LaneFenced)."""
            self._claim("z", lane)
            if data.draw(st.booleans()):  # the owner calls before it learns
                self.offset += 1
                r = RouteRequest(
                    "g1", False, TTLS[0], f"{lane}/{self.offset}", lane, continuation=True
                )
                self._call(OWNER[lane], [r], f"f{self.offset}")
            batch = data.draw(
                st.lists(
                    st.tuples(st.sampled_from(GIDS), st.integers(0, 5)), min_size=1, max_size=4
                )
            )
            requests = []
            for gid, kind in batch:
                self.offset += 1
                requests.append(
                    RouteRequest(
                        gid,
                        kind == 5,
                        TTLS[0],
                        f"{lane}/{self.offset}",
                        lane,
                        continuation=kind > 0,
                    )
                )
            self._call("z", requests, f"z{self.offset}")
            self._claim(OWNER[lane], lane)

        @rule()
        def table_lost(self) -> None:
            for t in self.pairs["u1"]:
                owners = t.owners()
                t.drop()
                if owners:  # the claims survive in this test: only the routing state is lost
                    client.hset(t.keys.owners, mapping=owners)
            self.finals.clear()
            self.batches.clear()

        @invariant()
        def same_tables(self) -> None:
            if self.pairs:
                a, b = self.pairs["u1"]
                tables_equal(a, b)

    return MemoryMachine


def test_remembered_groups_change_no_decision_and_no_table_state(redis_url: str) -> None:
    DECIDED.clear()
    machine = make_machine(redis_url)
    machine.TestCase.settings = settings(
        max_examples=80,
        stateful_step_count=40,
        deadline=None,
        derandomize=True,  # the same histories in every run: the count below is stable
        suppress_health_check=list(HealthCheck),
    )
    machine.TestCase().runTest()
    assert sum(DECIDED) > 250, f"the memory decided only {sum(DECIDED)} messages: not exercised"
