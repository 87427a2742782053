"""A caller's memory of its open groups: their plain members decided without sending them.

Most grouped messages are a group's middle members, and the route script writes nothing
for them (`same` in `router/table/store/lua/route.lua`): their group's entry is open on
their lane, with their TTL, at this step's update time, and the decision is its
destination. A caller that saw an entry in that form can decide the group's next plain
members itself, as `same` would, as long as nothing changed the entry since. The script
names, in each reply, the messages after which their entry is in that form
(`remembered`), with the table's generation and its time; the caller remembers those
groups, on lanes it claimed (`router.table.store.owners`), and sends the next call only
the other messages, naming how many it decided and under which generation and steps.

What can change such an entry unseen, and how each is caught, in the same atomic call that
routes the rest of the batch (the script refuses the whole call, `STALE`, and the caller
forgets and sends everything):

* another caller's message on the lane: only after a claim of the lane, which fences this
  caller's next call (`LaneFenced`); a group is used only under the claim token it was
  remembered under;
* an operator's release or eviction: the table's generation (stats 'generation') moves on;
* a sweep: it removes an entry only past its deadline, a TTL after the step the memory
  names, so only if Redis's clock went back since; a sweep that removed entries records
  its time (stats 'swept_at'), and a call at an earlier time is refused;
* the table lost, wholly or partly: the epoch and the write count;
* Redis's clock: the step the call's time gives each TTL must be the remembered one;
* a final the call carries (routed by an earlier batch still committing): its group is
  sent, as the script reads its entry before the batch.

Messages of other lanes never change such an entry (the script answers `!x` or `!h`
first). A lane held in the call (`!h`) skips the remembered members after it (`!s`), as the
script does. Pure logic: no I/O here; `router.table.store.management` calls Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from router.table.routing import HELD, SKIPPED, RouteRequest, updated_at

STALE = -2  # the first value of the route script's reply when the memory no longer held
LIMIT = 200_000  # groups remembered at most (the oldest forgotten first)


@dataclass(frozen=True, slots=True)
class Remembered:
    lane: str
    ttl: int
    dest: str
    step: int  # the entry's update time: `updated_at` of the call that saw it
    claim: str  # this caller's claim token on the lane then


@dataclass(slots=True)
class Split:
    """A batch's requests: those to send, in order, and the decisions of the others."""

    sent: list[int] = field(default_factory=list)  # indexes into the batch
    local: dict[int, str] = field(default_factory=dict)  # index -> destination
    steps: dict[int, int] = field(default_factory=dict)  # TTL -> the remembered step
    lanes: set[str] = field(default_factory=set)  # lanes of the local ones (fenced too)

    def args(self, generation: str) -> list[str | int]:
        """The route script's arguments for them (after the fences)."""
        if not self.local:
            return [0]
        out: list[str | int] = [len(self.local), generation, len(self.steps)]
        for ttl, step in self.steps.items():
            out += (ttl, step)
        return out


def plain(r: RouteRequest) -> bool:
    """A member `same` decides from its entry alone, once the entry is in its form."""
    return (
        r.guarantee_id is not None
        and not r.final
        and not r.force_share
        and not r.dead
        and not r.poison_stop
        and not r.close
        and not r.complete
        and r.seq is None
        and not r.targets
    )


class GroupMemory:
    def __init__(self, limit: int = LIMIT, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.at = clock()  # when the last reply came
        self.groups: dict[str, Remembered] = {}
        self.generation = ""  # the table's, at the last reply ('' before any)
        self.epoch = ""
        self.now_ms: int | None = None  # the script's time at the last reply
        self.limit = limit
        self.decided = 0  # messages decided from memory (metrics, tests)
        self.stale = 0  # calls the script refused as stale

    def forget(self) -> None:
        self.groups.clear()

    def split(
        self,
        requests: Sequence[RouteRequest],
        claims: Mapping[str, str],
        carried: Iterable[str] = (),
        now_ms: int | None = None,
    ) -> Split:
        """Which of a batch's requests to send, and the others' decisions. A group any of
        whose messages is sent is forgotten: the call may change its entry; so is a group
        whose final the call carries (the script reads its entry first: `carried`).
        `now_ms`: the call's time if the caller gives it, else the last reply's time moved
        on by this process's clock (a member whose step has passed is sent, not refused)."""
        out = Split()
        groups = self.groups
        if not groups:
            out.sent = list(range(len(requests)))
            return out
        for carried_gid in carried:
            groups.pop(carried_gid, None)
        now = now_ms
        if now is None and self.now_ms is not None:
            now = self.now_ms + int((self.clock() - self.at) * 1000)
        steps: dict[int, int] = {}  # TTL -> the step the call's time gives it
        for i, r in enumerate(requests):
            gid = r.guarantee_id
            g = groups.get(gid) if gid is not None else None
            if g is not None:
                if (
                    plain(r)
                    and r.lane == g.lane
                    and r.ttl_ms == g.ttl
                    and claims.get(r.lane) == g.claim
                    and now is not None
                ):
                    step = steps.get(g.ttl)
                    if step is None:
                        step = steps[g.ttl] = updated_at(now, g.ttl)
                    if g.step == step:
                        out.local[i] = g.dest
                        out.steps[g.ttl] = step
                        out.lanes.add(r.lane)
                        continue
                del groups[gid]  # type: ignore[arg-type]
            out.sent.append(i)
        return out

    def merge(
        self, requests: Sequence[RouteRequest], split: Split, decisions: Sequence[str]
    ) -> list[str]:
        """Every request's decision, in order: the script's for those sent, the memory's for
        the others, but `!s` after a message the script held on their lane."""
        if not split.local:
            return list(decisions)
        out: list[str] = []
        held: set[str] = set()
        got = iter(decisions)
        local = split.local
        for i, r in enumerate(requests):
            d = local.get(i)
            if d is None:
                d = next(got)
                if d == HELD:
                    held.add(r.lane)
            elif r.lane in held:
                d = SKIPPED
            else:
                self.decided += 1
            out.append(d)
        return out

    def learn(
        self,
        sent: Sequence[RouteRequest],
        decisions: Sequence[str],
        marked: str,
        generation: str,
        epoch: str,
        now_ms: int,
        reset: bool,
        claims: Mapping[str, str],
    ) -> None:
        """After a reply: remember the groups the script marked (`marked`: indexes into
        `sent`, comma-separated), on lanes this caller claimed; forget everything if the
        table's generation or epoch moved, or it was lost."""
        if reset or generation != self.generation or epoch != self.epoch:
            self.groups.clear()
        self.generation, self.epoch, self.now_ms = generation, epoch, now_ms
        self.at = self.clock()
        if reset:
            return
        groups = self.groups
        marks = {int(x) for x in marked.split(",")} if marked else set()
        for i, r in enumerate(sent):
            gid = r.guarantee_id
            if gid is None:
                continue
            claim = claims.get(r.lane)
            if i in marks and claim is not None:
                groups.pop(gid, None)  # (kept in order of learning: the oldest go first)
                groups[gid] = Remembered(
                    r.lane, r.ttl_ms, decisions[i], updated_at(now_ms, r.ttl_ms), claim
                )
            else:
                groups.pop(gid, None)
        while len(groups) > self.limit:
            del groups[next(iter(groups))]
