"""The Redis management table (Lua) against the reference model, on random histories.

Random interleavings of batches from several units (groups, ordinary messages, finals),
settles after commits, releases, clock advances and sweeps, under both busy policies.
After every step the real table (real Redis) must equal the model, and:

* one destination per open group, for as long as its entry lives;
* an ordinary message never lands on a destination in charge of an open group while a
  free destination exists;
* a new group never lands on a destination that is not clean (in charge of a group, or
  with another batch's ordinary messages in flight) while a clean one exists;
* an entry disappears only by a release with its final's token (or an operator's "*"),
  or by a sweep past its TTL;
* the load of each destination equals the number of open groups assigned to it;
* a stopped group (poison, stop policy) gets every later message parked, a continuation
  without an entry is an orphan and creates nothing, a dead-lettered message keeps its
  group going like any non-final message;
* under the `wait` policy (the waiting room), a new group or an ordinary message is
  either parked or placed on a destination that is clean (free, for an ordinary one),
  unless forced; the room, the park leases and the admitted groups equal the model's,
  and drains open or release admitted groups exactly as the model says;
* steering (`router.table.placement`): no new group and no ordinary message is placed on a
  draining destination while a non-draining one exists (and the draining set equals the
  model's); a pinned group's messages land on its pinned destination, whatever the
  policy; an eviction ("@<destination>") removes exactly the entries on it;
* multicast (`router.table.multicast`, any policy): every target gets the copy straight or
  parked in its destination's copies pseudo-group, straight only where no group is open
  (but ones closed earlier in the batch) and no earlier copy waits; copies are admitted
  to their own destination only;
* chained drains (`router.table.chain`): a waiting group joins an admitted one's destination
  only if it is complete as the drainer holds it and the destination is in charge of
  nothing but the groups the drain forwards whole.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from router.table import chain as chain_rule
from router.table import multicast, placement, room, waits
from router.table.model import TableModel
from router.table.routing import (
    DUPLICATE,
    HELD,
    IGNORED,
    NO_DEST,
    ORPHAN,
    PARKED,
    SKIPPED,
    SPANS,
    STOPPED,
    STOPPING,
    RouteRequest,
    TraceStep,
)
from router.table.store.management import ManagementTable, TableKeys
from tests.fixtures.helpers import unique

GIDS = [f"g{i}" for i in range(6)] + ["grüße|x", "a b"]  # non-ASCII and a '|' in an ID
LANES = ["q1/0", "q1/1", "q2/0"]
TTLS = [1_000, 5_000]
UNITS = ["u1", "u2", "u3"]
LEASE_MS = 3_000
MAX_STAGED = 2

Message = tuple[
    str | None, bool, int, str, bool, str, bool, bool, int | None, frozenset[int] | None
]
message = st.tuples(
    st.one_of(st.none(), st.sampled_from(GIDS)),  # None: an ordinary message
    st.booleans(),  # final (only meaningful with a guarantee ID)
    st.sampled_from(TTLS),
    st.sampled_from(LANES),
    st.integers(0, 20).map(lambda n: n == 0),  # force share, rarely
    # "": plain; d: dead-lettered (group continues); p: poison stopping its group;
    # c: a continuation (sequence number > 0); k: a close marker (final continuation)
    st.sampled_from(["", "", "", "", "c", "c", "d", "p", "k"]),
    # A group's messages come from its own lane, except rarely (a group that spans
    # partitions, or its ID reused on another lane)
    st.integers(0, 12).map(lambda n: n == 0),
    # whole-group delivery asked for (by the message's header or its type)
    st.integers(0, 3).map(lambda n: n == 0),
    # logical order: the member's sequence number, None for the one-lane rule; small
    # numbers give members in order, gaps, duplicates and IDs reused; -1: a bad member
    # whose number cannot be read
    st.one_of(st.none(), st.none(), st.integers(-1, 3)),
    # multicast (an ordinary message only): the indexes of its target destinations
    st.one_of(st.none(), st.none(), st.frozensets(st.integers(0, 3), min_size=1)),
)
LANE_OF = {g: LANES[i % len(LANES)] for i, g in enumerate(GIDS)}


def check_trace(trace: list[TraceStep], destinations: list[str]) -> None:
    for step in trace:
        d = step.decision
        if d[0] == "!" or step.known:  # held, skipped, parked, orphan; or a known group
            continue
        if set(destinations) - step.draining:  # some destination is not draining
            assert d not in step.draining, f"{step.request} placed on draining {d}"
        if step.request.guarantee_id is None:
            if step.free:
                assert d in step.free, f"ordinary message on busy {d} while {step.free} free"
        elif step.clean:
            assert d in step.clean, f"new group on unclean {d} while {step.clean} clean"


def make_table_machine(redis_url: str) -> type[RuleBasedStateMachine]:
    client = redis.Redis.from_url(redis_url)

    class TableMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.now = 1_000_000
            self.counter = 0
            self.table: ManagementTable | None = None
            self.model: TableModel | None = None
            self.assigned: dict[str, str] = {}  # gid -> dest while its entry lives
            self.unsettled: dict[str, set[str]] = {}  # batch -> its ordinary destinations
            self.pinned: dict[str, str] = {}  # gid -> destination, pinned, no message yet
            # batch -> its requests, decisions, and its groups' (state, parks) after it
            self.routed: dict[str, tuple[list[RouteRequest], list[str], dict[str, Any]]] = {}

        @initialize(
            policy=st.sampled_from(["share", "hold", "wait"]),
            ndest=st.integers(1, 4),
            homes=st.sampled_from([0, 0, 1, 2]),  # lanes' home destinations: off, 1 or 2 cells
        )
        def setup(self, policy: str, ndest: int, homes: int) -> None:
            dests = [f"d{i}" for i in range(ndest)]
            keys = TableKeys.of(unique("prop"), "t", "send")
            # a small staging bound, so that random histories reach it
            self.table = ManagementTable(
                client,
                keys,
                dests,
                policy,  # type: ignore[arg-type]
                LEASE_MS,
                MAX_STAGED,
                homes=homes,
            )
            self.model = TableModel(dests, policy, max_staged=MAX_STAGED, homes=homes)  # type: ignore[arg-type]

        def teardown(self) -> None:
            if self.table is not None:
                self.table.drop()

        def _requests(self, batch: list[Message]) -> list[RouteRequest]:
            out = []
            assert self.model is not None
            dests = self.model.destinations
            for gid, final, ttl, drawn_lane, force, drawn_kind, stray, complete, drawn, to in batch:
                self.counter += 1
                lane = LANE_OF[gid] if gid is not None and not stray else drawn_lane
                grouped = gid is not None
                targets = tuple(d for i, d in enumerate(dests) if i in (to or ()))
                if not grouped and targets:
                    out.append(RouteRequest(None, False, ttl, "", lane, force, targets=targets))
                    continue
                kind, seq = drawn_kind, None
                if drawn is not None and grouped and kind != "k":
                    # logical order: any lane, and the continuation flag is the seq's
                    lane, seq = drawn_lane, drawn
                    # -1: a bad member (dead-lettered, no continuation)
                    kind = "d" if seq < 0 else "c" if seq else ("" if kind == "c" else kind)
                token = f"{lane}/{self.counter}"
                out.append(
                    RouteRequest(
                        gid,
                        (final or kind == "k") and grouped,
                        ttl,
                        token,
                        lane,
                        force,
                        dead=kind == "d" and grouped,
                        poison_stop=kind == "p" and grouped,
                        continuation=kind in ("c", "k") and grouped,
                        close=kind == "k" and grouped,
                        complete=complete and grouped,
                        seq=seq,
                    )
                )
            return out

        @precondition(lambda self: self.table is not None)
        @rule(
            unit=st.sampled_from(UNITS),
            batch=st.lists(message, min_size=1, max_size=12),
            carry=st.booleans(),
        )
        def route(self, unit: str, batch: list[Message], carry: bool) -> None:
            self.route_requests(self._requests(batch), unit, carry)

        def route_requests(
            self, requests: list[RouteRequest], unit: str = "u9", carry: bool = False
        ) -> None:
            """`carry`: the unit's last unsettled batch is its batch in flight (overlapped
            commit), whose finals free their destinations for this one."""
            assert self.table is not None and self.model is not None
            earlier = [b for b in self.unsettled if b.startswith(f"{unit}:")][-1:] if carry else []
            carried = [
                (r.guarantee_id, r.token)
                for b in earlier
                for r, d in zip(*self.routed[b][:2], strict=True)
                if r.final and r.guarantee_id is not None and d in self.model.destinations
            ]
            self.counter += 1
            batch_id = f"{unit}:{self.counter}"
            before = set(self.model.entries)
            # pins whose entry is still pinned (not released, evicted or swept since)
            self.pinned = {
                g: d
                for g, d in self.pinned.items()
                if g in self.model.entries and self.model.entries[g].state == placement.PINNED
            }
            stopped_before = {g for g, e in self.model.entries.items() if e.closing == STOPPED}
            # stopped while in the waiting room: parked behind its earlier parked messages
            in_room = {g for g, e in self.model.entries.items() if e.state != room.OPEN}
            done_before = set(self.model.done)
            trace: list[TraceStep] = []
            expected = self.model.route(
                requests, self.now, batch_id, LEASE_MS, trace, carried, earlier
            )
            actual = self.table.route(
                requests, now_ms=self.now, batch=batch_id, carried=carried, earlier=earlier
            )
            assert actual == expected
            check_trace(trace, self.model.destinations)
            for step in trace:  # a pinned group's first message: on its destination
                gid, d = step.request.guarantee_id, step.decision
                if gid in self.pinned and d != SKIPPED:
                    pinned = self.pinned.pop(gid)
                    assert step.known and d.removeprefix(STOPPING) in (pinned, room.WAIT), (
                        f"pinned group {gid} ({pinned}) routed {d}"
                    )
                    if d == room.WAIT:  # logical order, out of sequence: admitted there
                        assert gid is not None
                        assert self.model.entries[gid].dest == pinned
            for step in trace:
                r = step.request
                if r.complete and not step.known and self.model.policy == "wait":
                    assert (
                        # DUPLICATE: a late member of a finished group, not a new group
                        step.decision in (room.WAIT, room.UNSTAGED, SKIPPED, DUPLICATE)
                        or r.continuation
                        or (r.close or r.poison_stop)
                    ), f"a new group asking for whole-group delivery was not staged: {step}"
            if self.model.policy == "wait":
                for step in trace:
                    d, r = step.decision, step.request
                    if d[0] == "!" or step.known:  # forced or not: never shared
                        continue
                    pool = step.free if r.guarantee_id is None else step.clean
                    assert d in pool, f"wait policy placed {r.guarantee_id} on busy {d}"
            for step in trace:
                r, d = step.request, step.decision
                if r.targets and d != SKIPPED:
                    straight, parked = multicast.split(d)
                    assert sorted([*straight, *parked]) == sorted(r.targets), step
                    for dest in straight:  # free, unless draining (a copy ignores it)
                        assert dest in step.free or dest in step.draining, step
                if r.guarantee_id in stopped_before:
                    parked = room.WAIT if r.guarantee_id in in_room else PARKED
                    # a poison again before the stop settled (a replay): closed again there
                    again = r.poison_stop and d.startswith(STOPPING) and d != STOPPING + NO_DEST
                    assert d == parked or again, "a stopped group's message was not parked"
                if d.startswith(STOPPING):
                    assert r.poison_stop and step.known, "only a stop of a known group"
                if d == IGNORED:
                    assert r.close and not step.known
                if d == ORPHAN:
                    assert r.continuation and not step.known and r.seq is None
                if d == SPANS:
                    assert step.known and r.guarantee_id is not None
                if d == DUPLICATE:  # a late member of a finished group in logical order
                    assert not step.known and r.seq and r.guarantee_id in done_before
            self.unsettled[batch_id] = {
                d
                for r, d in zip(requests, actual.decisions, strict=True)
                if r.guarantee_id is None and d[0] != "!"
            } | {
                dest
                for d in actual.decisions
                if d.startswith(multicast.FANOUT)
                for dest in multicast.split(d)[0]
            }
            for r, decision in zip(requests, actual.decisions, strict=True):
                d = decision.removeprefix(STOPPING)
                if r.guarantee_id is None or d in (
                    HELD,
                    SKIPPED,
                    PARKED,
                    ORPHAN,
                    SPANS,
                    IGNORED,
                    room.WAIT,
                    room.UNSTAGED,
                    NO_DEST,
                    DUPLICATE,
                ):
                    continue
                first = self.assigned.setdefault(r.guarantee_id, d)
                assert first == d, f"group {r.guarantee_id} moved from {first} to {d}"
            assert before <= set(self.model.entries), "routing removed an entry"
            self.routed[batch_id] = (requests, actual.decisions, self._rooms(requests))

        def _rooms(self, requests: list[RouteRequest]) -> dict[str, Any]:
            assert self.model is not None
            return {
                g: (e.state, e.parks)
                for r in requests
                if (g := r.guarantee_id) is not None and (e := self.model.entries.get(g))
            }

        @precondition(lambda self: self.table is not None and self.unsettled)
        @rule(data=st.data())
        def abort_and_replay(self, data: st.DataObject) -> None:
            """A batch's transaction aborts (it never settles: its leases end on their own)
            and its records are routed again under a new batch ID, as the unit that owns
            the partitions next does. The table keeps what the aborted batch routed; the
            replay must count nothing twice: a group still in the room as the aborted
            batch left it parks no more messages than before (but for an admitted one,
            whose drain check must see a replayed park), and the message that hit
            the staging bound answers UNSTAGED again (its event rode in the aborted
            transaction)."""
            assert self.table is not None and self.model is not None
            aborted = data.draw(st.sampled_from(sorted(self.unsettled)))
            del self.unsettled[aborted]
            requests, decisions, after = self.routed.pop(aborted)
            still = {g: v for g, v in after.items() if self._rooms(requests).get(g) == v}
            self.route_requests(requests)
            replay = self.routed[next(reversed(self.routed))]
            for gid, (state, parks) in still.items():
                mine = [
                    (r, old, new)
                    for r, old, new in zip(requests, decisions, replay[1], strict=True)
                    if r.guarantee_id == gid
                ]
                lanes = {r.lane for r, _, _ in mine}
                if (
                    state == room.OPEN
                    or len(lanes) > 1
                    or any(r.seq is not None for r, _, _ in mine)
                ):
                    continue  # the replay marks are per lane, for lane order in the room
                parked = (room.WAIT, room.UNSTAGED)  # parked then and now (not HELD then)
                if all(old in parked and new in parked for _, old, new in mine):
                    # except into an admitted group (admitted before, or by the replay's
                    # own call as leases ended): there each park counts, a replayed one
                    # too, for the drain's check (router.table.room.park)
                    now = self.model.entries[gid]
                    most = len(mine) if now.state == room.ADMITTED else 0
                    assert parks <= now.parks <= parks + most, (gid, state, parks, now, mine)
                    for _, old, new in mine:
                        assert old != room.UNSTAGED or new == room.UNSTAGED, (gid, mine)

        def _finals(self, data: st.DataObject) -> list[tuple[str, str]]:
            assert self.model is not None
            # A stopped group's closing is STOPPED: settling it frees its destination.
            closing = [(g, e.closing) for g, e in self.model.entries.items() if e.closing]
            stale = [(g, "q9/0/999999") for g in GIDS]  # tokens no final was routed from
            manual = [(g, "*") for g in GIDS]  # an operator's release
            # an operator's eviction of a destination (`router table evict`)
            evict = [(g, "@" + d) for g in GIDS for d in self.model.destinations]
            return data.draw(
                st.lists(st.sampled_from(closing + stale + manual + evict), max_size=4)
            )

        def _released(self, finals: list[tuple[str, str]]) -> set[str]:
            assert self.model is not None
            entries = self.model.entries
            dest = {g: e.dest for g, e in entries.items()}  # a STOPPED token frees it first
            out = set()
            for g, t in finals:
                if g not in entries or g in out:
                    continue
                if t == STOPPED and entries[g].closing == STOPPED:
                    dest[g] = NO_DEST
                elif t != STOPPED and t in (entries[g].closing, "*", "@" + dest[g]):
                    out.add(g)
            return out

        @precondition(lambda self: self.table is not None and self.unsettled)
        @rule(data=st.data())
        def settle(self, data: st.DataObject) -> None:
            assert self.table is not None and self.model is not None
            batch_id = data.draw(st.sampled_from(sorted(self.unsettled)))
            dests = self.unsettled.pop(batch_id)
            finals = self._finals(data)
            released = self._released(finals)
            before = set(self.model.entries)
            assert self.table.settle(batch_id, dests, finals) == self.model.settle(
                batch_id, dests, finals
            )
            assert before - set(self.model.entries) == released
            for g in released:
                self.assigned.pop(g, None)

        @precondition(lambda self: self.table is not None)
        @rule(data=st.data())
        def release(self, data: st.DataObject) -> None:
            assert self.table is not None and self.model is not None
            finals = self._finals(data)
            released = self._released(finals)
            before = set(self.model.entries)
            assert self.table.release(finals) == self.model.release(finals)
            assert before - set(self.model.entries) == released
            for g in released:
                self.assigned.pop(g, None)

        @precondition(
            lambda self: (
                self.model is not None
                and any(e.state == room.ADMITTED for e in self.model.entries.values())
            )
        )
        @rule(data=st.data())
        def drain(self, data: st.DataObject) -> None:
            """A drain batch forwarded an admitted group's parked messages and committed:
            it settles with the parks it saw (all, or one fewer: a park it did not read)
            and, if it forwarded the group's parked final, that final's token."""
            assert self.table is not None and self.model is not None
            admitted = sorted(g for g, e in self.model.entries.items() if e.state == room.ADMITTED)
            gid = data.draw(st.sampled_from(admitted))
            entry = self.model.entries[gid]
            seen = data.draw(st.sampled_from([entry.parks, entry.parks - 1]))
            finals = [(gid, entry.closing)] if entry.closing and seen == entry.parks else []
            next_seq = data.draw(st.integers(-1, 5))  # logical order: the drained-to number
            self.counter += 1
            batch_id = f"drain:{self.counter}"
            released = self._released(finals)
            drains = [(gid, seen, next_seq)]
            assert self.table.settle(batch_id, (), finals, drains) == self.model.settle(
                batch_id, (), finals, drains
            )
            for g in released:
                self.assigned.pop(g, None)

        @precondition(
            lambda self: (
                self.model is not None
                and any(e.state == room.ADMITTED for e in self.model.entries.values())
            )
        )
        @rule(data=st.data())
        def chain(self, data: st.DataObject) -> None:
            """A drain batch forwards a destination's admitted groups whole and asks to
            chain waiting groups behind them (`router.table.chain`): heads that are all of
            the destination's groups or not, candidates as complete as the drainer saw
            them or stale (a park it did not read, another final's position)."""
            assert self.table is not None and self.model is not None
            model = self.model
            busy = sorted({e.dest for e in model.entries.values() if e.state == room.ADMITTED})
            dest = data.draw(st.sampled_from(busy + busy + busy + model.destinations))
            on_dest = sorted(
                g for g, e in model.entries.items() if e.state == room.ADMITTED and e.dest == dest
            )
            heads = data.draw(
                st.sampled_from([on_dest, on_dest, on_dest, on_dest[:-1], sorted(model.entries)])
            )
            waiting = sorted(model.room)
            chosen = data.draw(st.lists(st.sampled_from(waiting), unique=True)) if waiting else []
            candidates = [
                (
                    g,
                    model.entries[g].parks - data.draw(st.sampled_from([0, 0, 0, 1])),
                    data.draw(st.sampled_from([model.entries[g].closing] * 3 + ["q9/0/999999"])),
                )
                for g in chosen
            ]
            plan = [(dest, heads, candidates)]
            expected = chain_rule.chain(model, plan)
            assert self.table.chain(plan) == expected
            for g in expected.get(dest, []):
                assert self.assigned.setdefault(g, dest) == dest, f"{g} moved to {dest}"
                complete = room.is_pseudo(g) or model.entries[g].closing
                assert complete, f"an incomplete group {g} was chained"

        @precondition(lambda self: self.table is not None)
        @rule()
        def expire(self) -> None:
            """The sweeper ends expired leases and admits to what they kept unclean."""
            assert self.table is not None and self.model is not None
            ended, admitted = room.expire(self.model, self.now)
            assert self.table.expire_leases(now_ms=self.now) == (ended, len(admitted))

        @precondition(lambda self: self.model is not None and bool(self.model.room))
        @rule(
            max_wait=st.integers(0, 6_000),
            policy=st.sampled_from(["report", "report", "share", "dead-letter"]),
        )
        def wait_timeout(self, max_wait: int, policy: str) -> None:
            """The sweeper ends the wait of groups waiting max_wait or longer."""
            assert self.table is not None and self.model is not None
            expected = waits.time_out(self.model, self.now, max_wait, policy)
            now, actual = self.table.room_timeout(max_wait, policy, now_ms=self.now)
            assert now == self.now and actual == expected
            if policy == "report":  # reported, still waiting: nothing else changes
                assert {o for _, o in actual} <= {room.WAIT}
                assert all(g in self.model.room for g, _ in actual)
            for gid, outcome in actual:
                if outcome not in (STOPPED, room.WAIT):
                    self.assigned.setdefault(gid, outcome)
            # Every time-out waits in the waits outbox for its event, as the sweeper read it.
            key = self.table.keys.waits_out
            waiting = self.table.waits_out(1000)
            assert waiting == [(now, max_wait, o, g) for g, o in actual]
            assert self.table.acked(key, self.table.items(key, 1000)) == len(actual)

        @precondition(lambda self: self.table is not None)
        @rule(gid=st.sampled_from(GIDS), data=st.data(), ttl=st.sampled_from(TTLS))
        def pin(self, gid: str, data: st.DataObject, ttl: int) -> None:
            """An operator pins a group (`router table pin`): created only if it has no entry."""
            assert self.table is not None and self.model is not None
            dest = data.draw(st.sampled_from(self.model.destinations))
            known = gid in self.model.entries
            expected = placement.pin(self.model, gid, dest, ttl, self.now)
            assert self.table.pin(gid, dest, ttl, now_ms=self.now) == expected == (not known)
            if expected:
                self.pinned[gid] = dest
                self.assigned[gid] = dest

        @precondition(lambda self: self.table is not None)
        @rule(data=st.data(), on=st.booleans())
        def drain_destination(self, data: st.DataObject, on: bool) -> None:
            """An operator drains a destination, or ends its drain (`router table drain`)."""
            assert self.table is not None and self.model is not None
            dest = data.draw(st.sampled_from(self.model.destinations))
            if on:
                assert self.table.drain(dest) == (dest not in self.model.draining)
                self.model.draining.add(dest)
            else:
                assert self.table.undrain(dest) == (dest in self.model.draining)
                self.model.draining.discard(dest)

        @precondition(lambda self: self.table is not None)
        @rule(ms=st.integers(1, 4_000))
        def advance(self, ms: int) -> None:
            self.now += ms

        @precondition(lambda self: self.table is not None)
        @rule(limit=st.integers(1, 10))
        def sweep(self, limit: int) -> None:
            assert self.table is not None and self.model is not None
            expired = {g for g, e in self.model.entries.items() if e.deadline_ms < self.now}
            expected = self.model.sweep(self.now, limit)
            actual = self.table.sweep(limit, now_ms=self.now)
            assert actual == expected
            assert {s.guarantee_id for s in actual} <= expired
            for s in actual:
                self.assigned.pop(s.guarantee_id, None)
            # Every swept entry waits in the outbox for its abandoned-group event.
            outbox = self.table.outbox(1000)
            assert outbox == actual
            self.table.ack_outbox(len(outbox))
            assert self.table.outbox(1000) == []

        @invariant()
        def table_equals_model(self) -> None:
            if self.table is None or self.model is None:
                return
            assert self.table.entries() == self.model.entries
            assert self.table.loads() == self.model.load
            assert self.table.cursor() == self.model.cursor
            assert self.table.inflight() == self.model.inflight
            assert self.table.room() == self.model.room
            # a group waits (state) exactly while it is in the room's FIFO
            waiting = {g for g, e in self.model.entries.items() if e.state == room.WAITING}
            assert waiting == set(self.model.room)
            assert self.table.draining() == self.model.draining
            assert self.table.park_leases() == self.model.park_leases
            waited = client.get(self.table.keys.waited)  # policy report: reported up to
            assert (None if waited is None else int(waited)) == self.model.reported_upto
            # Finished groups in logical order (their late members are duplicates until
            # the sweeper forgets them)
            done = {
                g.decode(): tuple(int(x) for x in v.decode().split("|"))
                for g, v in client.hgetall(self.table.keys.done).items()
            }
            assert done == self.model.done
            at = client.zrange(self.table.keys.done_at, 0, -1, withscores=True)
            assert {g.decode(): int(x) for g, x in at} == {g: d[1] for g, d in done.items()}
            assert self.table.admitted() == {
                g: e.dest for g, e in self.model.entries.items() if e.state == room.ADMITTED
            }
            # Load counts are exactly the open groups per destination.
            assert self.table.loads() == dict(
                Counter(e.dest for e in self.model.entries.values() if e.dest != NO_DEST)
            )
            # A staged group (whole-group delivery) waits in the FIFO only once complete,
            # and never holds a destination before.
            for g, e in self.model.entries.items():
                if e.state == room.STAGED:
                    assert g not in self.model.room and e.dest == NO_DEST and not e.closing
            closing = {g.decode() for g in client.zrange(self.table.keys.closing, 0, -1)}
            assert closing == {
                g
                for g, e in self.model.entries.items()
                if e.closing and e.closing != STOPPED and e.state == room.OPEN
            }

    return TableMachine


def test_lua_table_matches_reference_model(redis_url: str) -> None:
    machine = make_table_machine(redis_url)
    machine.TestCase.settings = settings(
        max_examples=200,
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    machine.TestCase().runTest()


def test_chained_drains_match_the_reference_model_under_wait(redis_url: str) -> None:
    """The same machine where chained drains happen often: policy `wait`, one or two
    destinations, longer histories (so that groups wait behind admitted ones)."""
    base = make_table_machine(redis_url)

    class WaitMachine(base):  # type: ignore[valid-type,misc]
        @initialize(ndest=st.integers(1, 2), homes=st.sampled_from([0, 1]))
        def setup(self, ndest: int, homes: int) -> None:  # type: ignore[override]
            base.setup(self, "wait", ndest, homes)

    WaitMachine.TestCase.settings = settings(
        max_examples=100,
        stateful_step_count=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    WaitMachine.TestCase().runTest()
