"""The routing decision of the patent, as a pure model over a table snapshot (no I/O).

This module names the rules and their types; `router.table.model.TableModel` is the
specification. The Redis adapter (`router.table.store.management`, scripts in
`router/table/store/lua/`) implements the same rules atomically inside Redis; a property test runs
both side by side on random histories and requires identical decisions and tables.

Rules, for each message of a batch, in order:

* A group lives on one *lane* (source partition), recorded in its entry: only one
  lane's order is a group's order. A continuation (sequence number > 0) of an open group
  from another lane answers SPANS (the unit dead-letters it, `group-spans-partitions`):
  routing it could append it out of order, or after the final the other lane releases. A
  first message (no sequence number > 0) from another lane is the ID reused, whether or
  not the old group's final was routed yet (its lane may simply be behind): it answers
  HELD until the release (whatever the policy) and then starts a new group. Held past
  `hold_timeout_ms` (`force_share`), the old group is taken as never ending: the
  message answers SPANS, so that an abandoned group cannot stop a lane until its TTL.
* Known group (its guarantee ID has an entry) -> the entry's destination. The entry's
  update time is refreshed (and its TTL set from this message). A final message marks the
  entry *closing* with the message's source position; the entry is removed only by
  `release` with that same position, after the forwarded final is committed in Kafka. A
  non-final message of a closing group (the ID reused) clears the mark, so the pending
  release no longer matches; but in lane order a first message under the ID of a complete
  group still in the waiting room, or a new whole group's under that of an open one,
  answers HELD until the old group's release (`router.table.room.reuses`; past the hold
  timeout it joins the old group), and a replayed message never clears it. In lane
  order, the entry records the `lane_seq` of the last message routed to its destination
  (`Entry.routed`, None if it had none) for operators, as of the entry's last write (the
  route script writes a busy group's entry once per step of its TTL: `updated_at`); a new
  group's entry, its first message's. It decides nothing.
* New group -> a *clean* destination: in charge of no open group, and with no ordinary
  message of another batch in flight to it (see below); recorded as a new entry.
* Ordinary message (no guarantee ID) -> a destination in charge of no open group; no
  entry. All ordinary messages of one batch go to one destination while it stays free,
  and that destination is *in flight* for the batch (a lease in the table) until the
  unit settles the batch after its Kafka commit, or the lease expires (the unit died).
  Without this fence, an ordinary message decided before a new group took the same free
  destination could be appended after the group's first message: an interleaving.
* Within a batch, a destination whose open groups all had their final message routed
  earlier in the same batch counts as free: the batch is one transaction from one
  producer, so what it sends there next is appended after those finals. For a *new group*
  only finals from the group's own lane count: if the batch aborts, the new group's entry
  survives, and a replay split over two units (a rebalance) could append the new group's
  messages before a final from another lane; from the same lane, any replay keeps the
  lane's order. (Other batches still see the destination busy until the batch commits
  and settles.) A message of the same batch that reuses such a closed group's ID after
  a new group took its destination answers HELD (whatever the policy) until the release;
  with `force_share` it is routed there anyway and counted as shared (policy wait: it
  stays held; the release comes, from the unit or the sweeper). Under policy wait, a
  first message (in logical order: seq 0) reusing the ID of an open closing group that is
  not the only group in charge of its destination (a group of its lane followed the final
  there; a chain whose settle was lost left several there) answers HELD too, until the
  release, whichever batch routed the final (`room.crowds`).
* Choosing among candidates: a destination's cost is its load (number of open groups
  not closed earlier in this batch) and, for a new group, whether another batch has it
  in flight. The cheapest are the
  candidates; the first candidate at or after a rotating cursor wins and the cursor moves
  past it. Deterministic, and it spreads batches and groups over the free destinations.
  A new group prefers, among the candidates, one that a final of its own lane freed in
  this batch (or in the batch still committing): a lane's groups that follow each other
  stay on few destinations, and the clean ones stay clean for the other lanes and the
  waiting room (`router.table.choice.choose`). Under "wait", a new group complete within
  its batch may take such a destination even while others wait, as long as the final
  that freed it was routed in the same call (`router.table.choice.follow`): both are
  released at the settle that would admit the oldest waiting group.
* No destination free (new group: none clean; ordinary: every one in charge of a group):
  policy "share" takes the cheapest candidate anyway (counted as shared); policy "hold"
  answers HELD and every later message from the same lane (source partition) in this
  batch answers SKIPPED, so the unit can stop that partition at the held offset. A
  request with `force_share` (its hold timed out) is shared under "share" and "hold";
  under "wait" nothing is ever shared: it waits (or is staged) like any other.
* Poison and orphans (the unit decides what is bad; the table keeps groups whole):
  - a request with `dead` (a bad message of a group under the dead-letter policy) is
    routed like any message of its group, so its group keeps its entry and continues;
    the unit dead-letters the message itself. A dead-lettered final still ends its group
    (its release frees the destination);
  - a request with `poison_stop` (a bad message under the stop-group policy) marks its
    group's entry stopped (creating one without a destination if the group is new) and
    answers STOPPING followed by the group's destination if it had one (so that the send
    unit can close the group downstream), else PARKED; every later message of a stopped
    group answers PARKED too, so the
    unit parks them in order and forwards nothing more of that group. Once the batch that
    stopped it commits, `settle` with the token STOPPED frees its destination (the entry
    stays, without a destination, so that later messages are still parked);
  - a request with `continuation` (sequence number > 0) for a group with no entry answers
    ORPHAN and creates nothing: its entry expired or the table was lost, and routing it as
    a new group could send the rest of the group to another destination;
  - a request with `close` (a close marker: the send side ended this group without
    forwarding its final, see `router.unit.steps.emit.emitter`) is a continuation and final of its
    group: a known group on its lane is closed like by a final, an unknown one answers IGNORED (the
    receive side never saw the group: nothing to close, no orphan counted).
* Logical order (a request with `seq`, send side): a group's members may come from any
  lane and in any order. A member goes straight to its group's destination only if the
  group is open, the member comes from the group's lane and carries the next sequence
  number (or a lower one from a position at or before the group's fence: a replay of an
  aborted batch, routed as before). Any other member of an open group puts the group back
  in the room as *admitted* (it keeps its destination) and is parked (WAIT); the drain
  step forwards parked members in sequence order, once the fence's batch is settled in
  Kafka. A member with a sequence number > 0 and no entry starts the group in the room
  (waiting, or staged for whole-group delivery) instead of being an orphan.
* Steering (`router.table.placement`): a *draining* destination takes no new group and no
  ordinary message (choosing, admitting from the room and ending a wait skip it) unless
  every destination is draining; groups open there continue. A *pinned* entry, created
  by an operator for a group with no entry yet, holds its destination (its load counts
  it) until the group's first message, which goes there and makes it an ordinary open
  entry on its lane, whatever the busy policy: a known group, never held, shared or
  waiting.
* Multicast (a request with `targets`, receive side, any policy; `router.table.multicast`): a
  copy straight to each target in charge of no group (but ones closed earlier in the
  batch) with no earlier copy waiting, leased to the batch like an ordinary message's
  destination; each other target's copy is parked in its copies pseudo-group
  (`router.table.room.copy_group`), admitted to that destination only once it is in charge of
  no group. The decision is FANOUT: "!m<straight,...>|<parked,...>". Never shared, held
  or timed out.
* `sweep(now, horizon)` removes entries idle past their TTL (update time + TTL before
  now), oldest deadline first, and only if their deadline is also before the side's
  horizon: never while the side's sources may still hold a record written before the
  deadline (`router/sweeper/horizon.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

HELD = "!h"
SKIPPED = "!s"
PARKED = "!p"  # a message of a stopped group
STOPPING = "!P"  # prefix: the message that stopped its group, then the group's destination
IGNORED = "!n"  # a close marker for a group the table does not know
ORPHAN = "!o"  # a continuation of a group that has no entry
SPANS = "!x"  # a message of an open group from another lane than the group's
DUPLICATE = "!D"  # logical order: a member of a finished group (duplicate-seq)
STOPPED = "!stop"  # Entry.closing of a stopped group
NO_DEST = "!"  # Entry.dest of a group stopped before it had a destination

Policy = Literal["share", "hold", "wait"]  # "wait": `router.table.room` (table only, so far)


@dataclass(slots=True)
class RouteRequest:
    """One message, as the table sees it."""

    guarantee_id: str | None
    final: bool
    ttl_ms: int
    token: str  # source position "topic/partition/offset": identifies a final's release
    lane: str  # source partition "topic/partition"
    force_share: bool = False
    dead: bool = False  # a bad message of this group, dead-lettered (group continues)
    poison_stop: bool = False  # a bad message of this group, which stops the group
    continuation: bool = False  # sequence number > 0: the group must already have an entry
    close: bool = False  # a close marker (with final and continuation): never an orphan
    complete: bool = False  # whole-group delivery: a new group is staged (policy wait)
    # Logical order (send side, `guarantee-order: logical`): the member's sequence number;
    # None: the group keeps the one-lane rule; -1: a bad member whose number cannot be read
    # (never straight: parked, and dead-lettered by the drain). The token is then always
    # its position.
    seq: int | None = None
    # Multicast (receive side, `router.table.multicast`): the receive queues to copy it to; ()
    # for any other message. The token is then ''.
    targets: tuple[str, ...] = ()
    # A grouped member's readable `guarantee-seq` where `seq` is None (lane order; also
    # the receive side, where a logical group keeps the one-lane rule): recorded in the
    # entry as the last number routed straight to the destination (`router table show`).
    # It decides nothing.
    lane_seq: int | None = None


@dataclass(slots=True)
class Entry:
    dest: str
    opened_ms: int
    updated_ms: int
    ttl_ms: int
    closing: str = ""  # source position of the routed final message, "" while open
    lane: str = ""  # the source partition the group's messages come from
    # "staged" (whole-group delivery, until its final), "waiting" or "admitted": in the
    # waiting room (`router.table.room`)
    state: str = "open"
    parks: int = 0  # messages of the group parked in the room so far
    # Logical order (`router.table.room`, "Logical order"): the sequence number the group's next
    # message must carry to go straight to its destination (-1: not in logical order), and
    # the source position of the last one that did (its batch may not be committed yet).
    next: int = -1
    fence: str = ""
    # ... and the source position of the member that started this group under its ID
    origin: str = ""
    # Lane order: the sequence number of the last member routed straight to `dest` (the
    # last routed, not the highest: a replay after an abort routes a lower one again), if
    # members carry one (`RouteRequest.lane_seq`); None if the last one routed had none.
    routed: int | None = None
    # The waiting room (`router.table.room`): the source position of the group's last
    # parked message, so that the replay of an aborted batch counts no park twice; and of
    # the message that hit the staging bound, so that its replay answers UNSTAGED again.
    parked: str = ""
    unstaged: str = ""

    @property
    def deadline_ms(self) -> int:
        return self.updated_ms + self.ttl_ms


# An entry's update time is its last use rounded up to a step of its TTL / DUE_STEPS (at
# least 1 ms): never before the group's last message, at most a step after it, so the
# entry lives at least its TTL past that message, at most a step more. A busy group's entry
# then changes once per step, not per message (the route script writes nothing for a
# member whose entry has this step's time already: `router/table/store/lua/route.lua`).
DUE_STEPS = 16


def updated_at(now_ms: int, ttl_ms: int) -> int:
    """The update time of an entry of TTL `ttl_ms` used at `now_ms`."""
    step = max(1, ttl_ms // DUE_STEPS)
    return -(-now_ms // step) * step


@dataclass(frozen=True, slots=True)
class RoomState:
    """What the drain step needs of a group's entry (`ManagementTable.room_state`)."""

    state: str
    dest: str
    closing: str
    parks: int
    leased: bool  # a park lease of the group is in flight
    next: int = -1  # logical order: the next sequence number to forward (-1: none)
    fence: str = ""  # logical order: the last message routed straight to `dest`
    origin: str = ""  # logical order: the member that started this group under its ID


@dataclass(frozen=True, slots=True)
class RouteResult:
    decisions: list[str]  # a destination name, or a "!" decision, one per request
    shared: int  # placed on a busy destination (policy share, or a hold that timed out)
    held: int
    created: int  # new entries
    stopped: int = 0  # groups stopped by a poison message
    orphans: int = 0  # continuations without an entry


@dataclass(frozen=True, slots=True)
class TraceStep:
    """What the table looked like when one request was decided (for property tests)."""

    request: RouteRequest
    decision: str
    known: bool  # the group already had an entry
    free: frozenset[str]  # in charge of no open group (except ones closed in this batch)
    # free for a new group of this lane (finals of this batch count only from the same
    # lane), and no other batch's ordinary messages in flight
    clean: frozenset[str]
    # draining destinations nothing new may be placed on (`router.table.placement`); `free` and
    # `clean` leave them out
    draining: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Swept:
    guarantee_id: str
    entry: Entry
    swept_ms: int
