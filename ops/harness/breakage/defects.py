"""The defects, each a monkeypatch of the router applied at a process's start-up
(`apply`), each breaking one guarantee in a way the short chaos run exercises:

  fencing-off            the consumed offsets are not sent into the batch's transaction
                         (no exactly-once hop, no fencing of a zombie by its consumer
                         group generation); the unit commits them itself, through its
                         consumer, every OFFSETS_EVERY_S after its transactions committed
                         (as auto-commit would). A unit killed, or a partition moved, in
                         between has its committed batches replayed by the partition's next
                         owner: duplicates.
  release-before-commit  the table's release of a batch (its finals' groups released, its
                         leases and parks ended) runs before the Kafka commit, not after it.
                         A unit armed to die `after_produce` dies with the release done and
                         the transaction never committed: the replay finds its groups gone
                         (split groups, interleavings, dead letters, losses). (Armed at
                         `after_commit` it dies before the release, which that point
                         precedes: nothing released, nothing committed, no harm.) Caught
                         in every run of its targeted scenario, 3 of 6 of the short chaos.
  lease-ignored          the in-flight leases are never checked: the route decision and
                         the waiting room's admission take a destination to which another
                         batch's ordinary messages are still in flight as clean, so a new
                         group can open there before they are appended: interleavings
                         under policy wait. Caught in every run of its targeted scenario (a
                         unit frozen between route and produce within its lease), 1 of 7
                         of the short chaos (docs/explanation/guarantees.md, broken builds).
  lease-unchecked        a unit never checks its batch's leases before producing (no
                         renewal, no `append_by`): a batch produced after its leases lapsed
                         (a commit held up by a broker restart, a paused unit) lands behind
                         a group another unit opened there meanwhile. Caught in every run
                         of its targeted scenario (frozen between route and produce past
                         its lease); never by the short chaos, none of whose batches
                         outlives its leases.
  reorder                a receive unit swaps the first two records its batch writes to
                         each receive queue: reordered groups, with no fault at all (the
                         transfer topic is left intact: reordering it breaks the receive
                         side's protocol so that everything is dead-lettered).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, Producer, TopicPartition

from router.contract.priority import split
from router.table.store import codec
from router.unit import loop
from router.unit.commit.leases import Leases
from router.unit.commit.session import TransactionalSession
from router.unit.steps.batch import Batch
from router.unit.steps.emit.records import Output, Record
from router.unit.steps.pipeline import RoutingSteps

log = logging.getLogger("ops.breakage")


@dataclass(frozen=True)
class Defect:
    guarantee: str  # what it breaks
    expected: str  # what the verdict must report
    patch: Callable[[], None]


# ---------------------------------------------------------------- fencing-off


class _OffsetsOutsideProducer(Producer):  # type: ignore[misc]
    """A transactional producer whose transactions never carry the consumed offsets."""

    def send_offsets_to_transaction(self, *args: Any, **kwargs: Any) -> None:
        return None


# How often the broken build commits the consumed offsets (as a consumer's auto-commit
# would): every kill or rebalance replays up to this much of committed work.
OFFSETS_EVERY_S = 2.0


def _fencing_off() -> None:
    setattr(loop, "Producer", _OffsetsOutsideProducer)  # noqa: B010 (not exported)
    complete = loop.TransferUnit._complete
    pending: dict[tuple[str, int], int] = {}
    last = [time.monotonic()]

    def complete_then_commit_offsets(self: loop.TransferUnit) -> bool:
        inflight = self._inflight
        ok = complete(self)
        if ok and inflight is not None:
            for tp in inflight[0].resume_offsets():
                pending[(tp.topic, tp.partition)] = tp.offset
            if pending and time.monotonic() - last[0] >= OFFSETS_EVERY_S:
                offsets = [TopicPartition(t, p, o) for (t, p), o in pending.items()]
                pending.clear()
                last[0] = time.monotonic()
                try:
                    self.source.consumer.commit(offsets=offsets, asynchronous=False)
                except KafkaException as exc:
                    log.warning("broken build: offsets not committed: %s", exc)
        return ok

    loop.TransferUnit._complete = complete_then_commit_offsets  # type: ignore[method-assign,assignment]


# ---------------------------------------------------------------- release-before-commit


def _release_before_commit() -> None:
    commit = TransactionalSession.commit

    def release_then_commit(
        self: TransactionalSession,
        offsets: list[TopicPartition],
        group_metadata: Any,
        append_by: float | None = None,
        after: Callable[[], None] | None = None,
    ) -> None:
        if after is not None:
            after()  # the table's release (and the after_commit fault point) first
        commit(self, offsets, group_metadata, append_by, None)

    TransactionalSession.commit = release_then_commit  # type: ignore[method-assign]


# ---------------------------------------------------------------- lease-ignored

# (script, text, replacement): each must be found, or the broken build refuses to start
# (a changed script would otherwise make it silently whole again).
LEASE_CHECKS = (
    (
        "route",
        "if b ~= batch and not earlier[b] then fenced[d] = true end",
        "if false then fenced[d] = true end",
    ),
    ("prelude", "    leased[string.match(m, '^([^|]*)|')] = true\n", ""),
)


def without_lease_checks(lua: str) -> str:
    """A table script (after its prelude) with the in-flight lease checks taken out."""
    for _, text, replacement in LEASE_CHECKS:
        lua = lua.replace(text, replacement)
    return lua


def _lease_ignored() -> None:
    original = codec.script
    route = original("route")  # the prelude and route.lua
    for name, text, _ in LEASE_CHECKS:
        if text not in route:
            raise RuntimeError(f"broken build lease-ignored: {text!r} not in {name}.lua")

    def script(name: str) -> str:
        return without_lease_checks(original(name))

    for name, module in list(sys.modules.items()):  # every table module that loads scripts
        if name.startswith("router.table.store") and getattr(module, "script", None) is original:
            module.script = script  # type: ignore[attr-defined]


# ---------------------------------------------------------------- lease-unchecked


def _lease_unchecked() -> None:
    def keep(self: Leases, batch: Batch, dests: Collection[str], parked: bool = False) -> None:
        return None

    Leases.keep = keep  # type: ignore[method-assign]


# ---------------------------------------------------------------- reorder


def swap_first_two(records: list[Record], queues: Collection[str]) -> int:
    """Swap the first two records on each of `queues` (a band topic counts as its queue's)
    in place; returns how many pairs were swapped."""
    first: dict[tuple[str, int], int] = {}
    swapped = 0
    for i, r in enumerate(records):
        if split(r.topic, queues)[0] not in queues:
            continue
        j = first.setdefault((r.topic, r.partition), i)
        if 0 <= j < i:
            records[i], records[j] = records[j], records[i]
            first[(r.topic, r.partition)] = -1
            swapped += 1
    return swapped


def _reorder() -> None:
    emit = RoutingSteps.emit

    def emit_swapped(self: RoutingSteps, batch: Batch, now_ms: int) -> Output:
        out = emit(self, batch, now_ms)
        spec = self.emitter.spec
        if spec.side == "receive":  # the transfer topic intact: only deliveries reordered
            swap_first_two(out.records, frozenset(spec.destinations))
        return out

    RoutingSteps.emit = emit_swapped  # type: ignore[method-assign]


DEFECTS: dict[str, Defect] = {
    "fencing-off": Defect("nothing duplicated (exactly once per hop)", "duplicated", _fencing_off),
    "release-before-commit": Defect(
        "a group whole on one destination, no interleaving",
        "split groups, interleavings, losses or dead letters",
        _release_before_commit,
    ),
    "lease-ignored": Defect("no interleaving (policy wait)", "interleaved", _lease_ignored),
    "lease-unchecked": Defect("no interleaving (policy wait)", "interleaved", _lease_unchecked),
    "reorder": Defect("order within a group", "reordered", _reorder),
}


def apply(name: str) -> None:
    """Patch `name`'s defect into this process's router."""
    DEFECTS[name].patch()
    log.warning("BROKEN BUILD: %s (breaks: %s)", name, DEFECTS[name].guarantee)
