"""Redelivery at the head and a delivery limit for the receiver library (pure rules).

Seed 002 (a transactional queue): a message a consumer took but did not complete goes
back ahead of later messages. `Receiver.abandon(message)` rewinds the message's
partition to it, so it and everything after it on that partition come again, in order.
Each abandon counts one failed delivery of that message (`router.receiver.deliverycounts` keeps
the counts in Redis, per consumer group, queue, partition and offset). At
`max_deliveries` the message is dead-lettered with reason `max-deliveries` and the
receiver moves on; a grouped message's poison policy (`guarantee-on-poison`, else by
`message-type`, else the receiver's default, as in the units) says what happens to the
rest of its group: `dead-letter` (the group goes on without it) or `stop-group` (its
later members are dead-lettered as `group-stopped`, up to the final).

`Ledger` is what the receiver knows per partition it reads: the counts, the offsets
dead-lettered but perhaps not committed yet (skipped if they come again), and the stopped
groups. It is loaded from the partition's Redis hash and kept up to date locally, so a
message delivered and committed costs no Redis call. The hash's fields:

* `<offset>` -> deliveries that failed (abandons) so far;
* `dead:<offset>` -> `1`: dead-lettered, its dead letter flushed (skip it if read again);
* `stop:<guarantee-id>` -> `<stop offset>:<last offset dead-lettered>`: a stopped group.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from router import contract
from router.config.settings import RouterSettings
from router.errors import ConfigError

TP = tuple[str, int]
Headers = Sequence[tuple[str, bytes | None]]
Policy = Literal["dead-letter", "stop-group"]

MAX_DELIVERIES = 5  # the default: a message is handed out at most 5 times
COUNT_TTL_S = 7 * 86_400  # a partition's counts live this long after its last abandon
MAX_DELIVERIES_REASON = "max-deliveries"
GROUP_STOPPED_REASON = "group-stopped"

Verdict = Literal["deliver", "skip", "limit", "stopped"]
DELIVER: Final = "deliver"
SKIP: Final = "skip"
LIMIT: Final = "limit"
STOPPED: Final = "stopped"

_RECV = re.compile(r"^(.+)\.recv\.\d+$")


@dataclass(frozen=True, slots=True)
class RedeliveryOptions:
    """How the receiver redelivers and dead-letters (`Receiver(..., redelivery=...)`).

    `poison_policy` and `poison_policy_by_type`: a grouped message's group outcome at the
    limit when its own `guarantee-on-poison` header does not say (the router's
    `routing.poison_policy` and `routing.poison_policy_by_type`). `count_ttl_s`: how long
    a partition's delivery counts are kept after its last abandon. `dead_letter_topic`,
    `events_topic`: default `<topology>.dlq`, `<topology>.events` (the topology's name, or
    the `<name>` of receive queues `<name>.recv.<n>`). `max_value_bytes`: a longer payload
    is truncated in its dead letter (`value_size` keeps the original size)."""

    poison_policy: Policy = "dead-letter"
    poison_policy_by_type: Mapping[str, Policy] = field(default_factory=dict)
    count_ttl_s: float = COUNT_TTL_S
    dead_letter_topic: str | None = None
    events_topic: str | None = None
    max_value_bytes: int = 1_048_576

    @classmethod
    def of(cls, settings: RouterSettings) -> RedeliveryOptions:
        """The router's poison policies, topics and record size limit."""
        return cls(
            poison_policy=settings.routing.poison_policy,
            poison_policy_by_type=settings.routing.poison_policy_by_type,
            dead_letter_topic=settings.topology.dead_letter_topic,
            events_topic=settings.topology.events_topic,
            max_value_bytes=settings.kafka.max_message_bytes,
        )

    def __post_init__(self) -> None:
        policies = [self.poison_policy, *self.poison_policy_by_type.values()]
        bad = [p for p in policies if p not in contract.POISON_POLICIES]
        if bad:
            raise ConfigError(f"poison policy {bad[0]!r} is not one of {contract.POISON_POLICIES}")
        if self.count_ttl_s <= 0:
            raise ConfigError("count_ttl_s must be positive")


def check_max_deliveries(max_deliveries: int | None) -> int:
    """The limit as a number: 0 for none (None or 0); ConfigError if negative."""
    if max_deliveries is None:
        return 0
    if isinstance(max_deliveries, bool) or not isinstance(max_deliveries, int):
        raise ConfigError(f"max_deliveries must be an integer or None, not {max_deliveries!r}")
    if max_deliveries < 0:
        raise ConfigError("max_deliveries must be at least 1 (0 or None: no limit)")
    return max_deliveries


def at_limit(failed: int, max_deliveries: int) -> bool:
    """Whether a message whose deliveries failed `failed` times is not handed out again."""
    return max_deliveries > 0 and failed >= max_deliveries


def topology_of(topology: str | None, queues: Sequence[str]) -> str | None:
    """The topology's name: given, or the common `<name>` of queues `<name>.recv.<n>`."""
    if topology:
        return topology
    names = {m.group(1) if (m := _RECV.match(q)) else None for q in queues}
    if len(names) == 1:
        return names.pop()
    return None


def poison_policy(headers: Headers, options: RedeliveryOptions) -> Policy:
    """A message's group outcome: its `guarantee-on-poison`, else its `message-type`'s
    policy, else the default (an unreadable header counts as absent)."""
    values = {k: v for k, v in headers if v is not None}
    own = values.get(contract.ON_POISON, b"").decode("utf-8", "replace")
    if own == "dead-letter":
        return "dead-letter"
    if own == "stop-group":
        return "stop-group"
    kind = values.get(contract.MESSAGE_TYPE, b"").decode("utf-8", "replace")
    return options.poison_policy_by_type.get(kind, options.poison_policy)


def count_field(offset: int) -> str:
    return str(offset)


def dead_field(offset: int) -> str:
    return f"dead:{offset}"


def stop_field(gid: str) -> str:
    return f"stop:{gid}"


def stop_value(stop_offset: int, last_offset: int) -> str:
    return f"{stop_offset}:{last_offset}"


@dataclass(slots=True)
class PartitionState:
    """One partition's delivery counts, dead-lettered offsets and stopped groups."""

    counts: dict[int, int] = field(default_factory=dict)
    dead: set[int] = field(default_factory=set)
    stopped: dict[str, tuple[int, int]] = field(default_factory=dict)  # gid -> (stop, last)


def parse(fields: Mapping[str, str]) -> PartitionState:
    """A partition's hash, as `Ledger` keeps it (malformed fields are ignored)."""
    state = PartitionState()
    for name, value in fields.items():
        if name.isdigit() and value.isdigit():
            state.counts[int(name)] = int(value)
        elif name.startswith("dead:") and name[5:].isdigit():
            state.dead.add(int(name[5:]))
        elif name.startswith("stop:"):
            stop, _, last = value.partition(":")
            if stop.isdigit() and last.isdigit():
                state.stopped[name[5:]] = (int(stop), int(last))
    return state


class Ledger:
    """Per partition read, what the receiver knows of failed deliveries (pure)."""

    def __init__(self, max_deliveries: int) -> None:
        self.max_deliveries = max_deliveries
        self._parts: dict[TP, PartitionState] = {}
        self._committed: dict[TP, int] = {}

    def loaded(self, tp: TP) -> bool:
        return tp in self._parts

    def load(self, tp: TP, fields: Mapping[str, str]) -> None:
        self._parts[tp] = parse(fields)

    def forget(self, tp: TP) -> None:
        """The partition was taken away: its next owner loads it again."""
        self._parts.pop(tp, None)
        self._committed.pop(tp, None)

    def failed(self, tp: TP, offset: int) -> int:
        """How many deliveries of the message failed (abandons) so far."""
        part = self._parts.get(tp)
        return part.counts.get(offset, 0) if part else 0

    def counted(self, tp: TP, offset: int, failed: int) -> None:
        self._parts.setdefault(tp, PartitionState()).counts[offset] = failed

    def verdict(self, tp: TP, offset: int, gid: str | None) -> Verdict:
        """What to do with a message read: hand it out (`deliver`); `skip` it (its dead
        letter was written before, or it is a stopped group's member dead-lettered
        before); dead-letter it (`limit`: its deliveries reached the limit, a receiver
        stopped before writing the dead letter; `stopped`: its group is stopped)."""
        part = self._parts.get(tp)
        if part is None:
            return DELIVER
        if offset in part.dead:
            return SKIP
        if gid is not None and gid in part.stopped:
            stop, last = part.stopped[gid]
            if offset > stop:
                return SKIP if offset <= last else STOPPED
        if at_limit(part.counts.get(offset, 0), self.max_deliveries):
            return LIMIT
        return DELIVER

    def dead_lettered(self, tp: TP, offsets: Sequence[int]) -> None:
        self._parts.setdefault(tp, PartitionState()).dead.update(offsets)

    def stop(self, tp: TP, gid: str, stop_offset: int, last_offset: int) -> None:
        self._parts.setdefault(tp, PartitionState()).stopped[gid] = (stop_offset, last_offset)

    def unstop(self, tp: TP, gid: str) -> None:
        part = self._parts.get(tp)
        if part is not None:
            part.stopped.pop(gid, None)

    def stopped(self, tp: TP, gid: str) -> tuple[int, int] | None:
        part = self._parts.get(tp)
        return part.stopped.get(gid) if part else None

    def committed(self, tp: TP, offset: int) -> None:
        """Kafka committed `offset` for the partition (a commit's report)."""
        if offset >= 0:
            self._committed[tp] = max(self._committed.get(tp, 0), offset)

    def stale(self, tp: TP) -> list[str]:
        """The fields of offsets below the committed offset, forgotten here: the caller
        deletes them from Redis with its next write (a committed message never comes
        again to this consumer group). Stopped groups stay until their final."""
        part = self._parts.get(tp)
        below = self._committed.get(tp)
        if part is None or below is None:
            return []
        gone = [o for o in part.counts if o < below]
        dead = [o for o in part.dead if o < below]
        for o in gone:
            del part.counts[o]
        part.dead.difference_update(dead)
        return [count_field(o) for o in gone] + [dead_field(o) for o in dead]
