"""What the emit step produces (pure): the records of a batch's transaction and its counts
(`Output`), and what the emit step's helpers (`router.unit.steps.emit.fanout`,
`router.unit.steps.emit.letters`, `router.unit.steps.emit.markers`) read of the emitter that calls
them (`Emitting`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from router.config.settings import RoutingSettings
from router.contract import lifetime
from router.contract.headers import BadInput
from router.topology.side import SideSpec
from router.unit.steps.batch import Item


class Emitting(Protocol):
    """The emitter as its helpers see it (`router.unit.steps.emit.emitter.Emitter`)."""

    @property
    def spec(self) -> SideSpec: ...
    @property
    def topology(self) -> str: ...
    @property
    def unit(self) -> str: ...
    @property
    def on_expiry(self) -> str:
        """A group's default outcome of an expired member (`router.contract.lifetime`)."""
        ...

    @property
    def rules(self) -> RoutingSettings:
        """The routing settings: markers read a parked member's headers with them."""
        ...

    def park_in_room(self, item: Item, gid: str | None = None) -> Record:
        """The record that parks `item` in the waiting room (under `gid`, if given)."""
        ...


# Larger forwarded records get a delivery report, so that a broker's refusal (too large
# for the destination topic) dead-letters them when the batch is replayed.
TRACK_DELIVERY_BYTES = 65_536


class Record(NamedTuple):
    topic: str
    partition: int  # -1: the producer's partitioner
    key: bytes | None
    value: bytes | None
    headers: Any
    timestamp: int  # 0: now
    source: tuple[str, int, int] | None  # track the delivery of this source position


@dataclass(slots=True)
class Output:
    records: list[Record] = field(default_factory=list)
    # (gid, token) of finals routed (forwarded, or dead-lettered: the group ends either way)
    finals: list[tuple[str, str]] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)  # groups this batch stopped
    ordinary_dests: set[str] = field(default_factory=set)
    forwarded: int = 0
    grouped: int = 0
    dead: int = 0
    expired: int = 0  # not forwarded: their lifetime ended (ExpiredMessage events)
    parked: int = 0
    groups_stopped: int = 0
    orphans_parked: int = 0
    # (gid, parks seen, next sequence number or -1): `router.table.room.drained`
    drains: list[tuple[str, int, int]] = field(default_factory=list)
    # the room lanes they came from, with this unit's claim token on each when it drained
    # them: the settle's drains are fenced by them (a zombie's late settle opens nothing:
    # `router.table.store.settling`)
    drain_claims: dict[str, str] = field(default_factory=dict)
    parked_in_room: int = 0  # parked in the waiting room
    drained: int = 0  # forwarded out of the waiting room (counted in forwarded too)
    chained: int = 0  # waiting groups drained whole behind an admitted one (router.table.chain)
    # per group first drained here: its oldest parked message's age (ms, from its timestamp)
    room_waits_ms: list[int] = field(default_factory=list)
    staging_aborted: int = 0  # staged groups over max_staged_messages, now streamed
    staged_bytes: int = 0  # payload bytes parked for whole-group delivery
    seq_duplicates: int = 0  # logical order: members below the next number, dead-lettered
    sequence_gaps: int = 0  # logical order: SequenceGap events
    closes: int = 0  # close markers consumed (receive side)
    close_markers: int = 0  # close markers produced (send side)
    skips: int = 0  # skip markers consumed (receive side): routed, forwarded nowhere
    skip_markers: int = 0  # skip markers produced (send side)
    # multicast messages fanned out (receive side, router.unit.steps.emit.fanout)
    multicast: int = 0
    multicast_copies: int = 0  # ... their copies, written straight or parked in the room
    # Positions in `records` before which every earlier record must be on the broker
    # (`router.unit.steps.bands.barriers`): with priority bands a destination is several
    # partitions, and one transaction's records on two partitions are appended in no
    # particular order.
    barriers: list[int] = field(default_factory=list)
    # Where the drain step's records begin in `records` (-1: no drain): a unit's spans
    # (`router.unit.spans`) tell messages forwarded out of the waiting room by it.
    drain_from: int = -1

    @property
    def consumed(self) -> int:
        return (
            self.forwarded
            + self.dead
            + self.expired
            + self.parked
            + self.closes
            + self.skips
            + self.parked_in_room
            - (self.multicast_copies - self.multicast)  # one message, several records
        )

    def lettered(self, bad: BadInput) -> None:
        """Count a message `Emitter.dead_letter` wrote for: a dead letter, or expired."""
        if bad.code == lifetime.EXPIRED:
            self.expired += 1
        else:
            self.dead += 1


# Record(...) without the generated __new__'s call overhead (the emit loop's hot path)
new_record = tuple.__new__
