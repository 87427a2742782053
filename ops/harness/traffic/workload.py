"""Realistic traffic: several senders, orders (groups) of varied sizes mixed with stock
updates (ordinary messages), payloads in Avro (`schemas/demo/OrderEvent.avsc`).

`plan()` is a pure, seeded generator of one sender's messages in send order;
`ops.harness.traffic.senders.Senders` runs one thread per sender, each with its own
`router.sender.Sender`, and records every message Kafka acknowledged (`Sent`), which is
what the verifier expects to receive.

Delivery QoS shares (`WorkloadSpec.multicast_fraction`, `expiring_fraction`), drawn from a
random stream of their own so the rest of a seeded plan stays the same:

* multicast: an ordinary message with `message-delivery: multicast`, to every receive
  queue or (half of them) to a named subset (`multicast-queues`); expected once on each;
* expiring: an ordinary message, or a group member that is not the final, with a
  lifetime (`message-on-expiry: skip` on a member) and the workload's `event-id` header,
  by which its ExpiredMessage event names it. A third already expired
  (`message-expires-at` in 1970), a third with 2 s (delivered or expired, as the run
  goes), a third with 10 minutes. A final never expires: its group would end without it,
  and the verifier judges a group's span on a queue from its first record to its final.
  A message is never both multicast and expiring.

The priority share (`WorkloadSpec.priority_fraction`), from a random stream of its own
too: of the ordinary messages and of the groups, that share carries a `message-priority`
header of a random value 0..9 (with the router's `Sender`, a message with one goes to its
band's send queue). In a group, the header is on its first member, and every later member
carries a random different priority, which the router must ignore: the group keeps its
first member's band. `Sent.priority` records the header each message carried; the verdict
judges the bands from it (`ops.harness.verdict.bands`). Independent of the QoS shares: a
multicast or expiring message may carry a priority too.

The group kinds (`WorkloadSpec.whole_fraction`, `logical_fraction`), from a stream of their
own: a share of the new groups asks for whole-group delivery, another share is in logical
order, its members scattered (`logical_group`); `ops.harness.verdict.features` judges both.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ops.harness.verdict.accounts import EVENT_ID_HEADER
from ops.harness.verdict.records import Sent
from router.contract import headers_for, lifetime, multicast, priority, schemas

ORDER_EVENT = "router.demo.OrderEvent"


@dataclass(frozen=True)
class WorkloadSpec:
    run_id: str
    senders: int = 4
    messages: int = 5_000  # in total, over all senders
    grouped_fraction: float = 0.7  # share of messages that belong to a group
    max_group: int = 40
    open_per_sender: int = 1  # groups one sender keeps open at once
    payload_bytes: int = 200
    rate: float | None = None  # messages per second per sender; None = as fast as possible
    seed: int = 1
    # A plain Kafka producer with the README's headers only (no router client): sender i
    # writes to send queue i (mod their number), a group's messages keyed by its ID
    plain: bool = False
    multicast_fraction: float = 0.0  # of the ordinary messages: multicast
    expiring_fraction: float = 0.0  # of the others (finals excepted): with a lifetime
    receive_queues: tuple[str, ...] = ()  # the topology's: multicast's targets
    priority_fraction: float = 0.0  # of the ordinary messages and of the groups: a priority
    # Of the new groups (`plan`): with whole-group delivery (`guarantee-delivery: complete`
    # on the first member), and in logical order (`guarantee-order: logical`, every member
    # numbered, the whole group sent at once in shuffled order, each member to a random
    # send-queue partition: `Senders` sends these with a plain producer). Neither carries
    # a lifetime, a priority or multicast.
    whole_fraction: float = 0.0
    logical_fraction: float = 0.0
    # Every group open before any final (`phased`): each sender sends every group's first
    # member, then the middle members, then the finals (groups of 2..max_group messages;
    # ordinary messages spread over the three phases); QoS shares and priorities unused
    phased: bool = False


def group_size(rng: random.Random, max_group: int) -> int:
    """Mostly small orders, some medium, a few large."""
    roll = rng.random()
    if roll < 0.5:
        return rng.randint(1, min(5, max_group))
    if roll < 0.85:
        return rng.randint(min(6, max_group), min(20, max_group))
    return rng.randint(min(21, max_group), max_group)


def encode_event(
    event_id: str,
    sender: str,
    group: str | None,
    seq: int,
    final: bool,
    rng: random.Random,
    payload_bytes: int,
    created_ms: int | None = None,
) -> bytes:
    record: dict[str, Any] = {
        "event_id": event_id,
        "sender": sender,
        "kind": "ORDER_LINE" if group else "STOCK_UPDATE",
        "order_id": group,
        "line_no": seq,
        "last_line": final,
        "sku": f"SKU-{rng.randint(1, 9999):04d}",
        "quantity": rng.randint(1, 20),
        "unit_price_cents": rng.randint(99, 99_999),
        "created_at": int(time.time() * 1000) if created_ms is None else created_ms,
        "note": "",
    }
    raw = schemas.encode(ORDER_EVENT, record)
    if len(raw) < payload_bytes:
        record["note"] = "x" * (payload_bytes - len(raw) - 2)
        raw = schemas.encode(ORDER_EVENT, record)
    return raw


LIFETIMES: tuple[tuple[str, bytes], ...] = (
    (lifetime.EXPIRES_AT, b"1000"),  # long gone: expired at the first hop
    (lifetime.LIFETIME_MS, b"2000"),  # delivered or expired, as the run goes
    (lifetime.LIFETIME_MS, b"600000"),  # delivered, unless the run stalls for 10 minutes
)
Headers = list[tuple[str, bytes]]


def qos(
    spec: WorkloadSpec, rng: random.Random, event_id: str, group: str | None, final: bool
) -> tuple[Headers, tuple[str, ...] | None, bool]:
    """A message's QoS headers, its multicast targets (None: point-to-point) and whether
    it has a lifetime."""
    roll = rng.random()
    if group is None and roll < spec.multicast_fraction:
        queues = spec.receive_queues
        if not queues:
            raise ValueError("multicast_fraction needs the topology's receive_queues")
        headers: Headers = [(multicast.DELIVERY, multicast.MULTICAST.encode())]
        if len(queues) > 2 and rng.random() < 0.5:
            chosen = set(rng.sample(queues, rng.randint(1, len(queues) - 1)))
            targets = tuple(q for q in queues if q in chosen)
            headers.append((multicast.QUEUES, ",".join(targets).encode()))
            return headers, targets, False
        return headers, tuple(queues), False
    if group is None:
        expiring = roll < spec.multicast_fraction + spec.expiring_fraction
    else:
        expiring = not final and roll < spec.expiring_fraction
    if expiring:
        headers = [rng.choice(LIFETIMES), (EVENT_ID_HEADER, event_id.encode())]
        if group is not None:
            headers.append((lifetime.ON_EXPIRY, b"skip"))
        return headers, None, True
    return [], None, False


def ranked(
    spec: WorkloadSpec, rng: random.Random, group: str | None, seq: int, first: dict[str, int]
) -> int | None:
    """A message's priority header (None: none). `first`: the priorities of the open
    groups' first members (a group in the share: its later members say something else)."""
    if group is not None and seq > 0:
        given = first.get(group)
        if given is None:
            return None
        return rng.choice([p for p in range(priority.MAX_PRIORITY + 1) if p != given])
    if rng.random() >= spec.priority_fraction:
        return None
    chosen = rng.randint(0, priority.MAX_PRIORITY)
    if group is not None:
        first[group] = chosen
    return chosen


def phased(spec: WorkloadSpec, index: int) -> Iterator[tuple[Sent, dict[str, Any]]]:
    """One sender's messages with every group open before any final is sent: all first
    members, then all middle members (round by round), then all finals, ordinary
    messages spread evenly over the three phases (`WorkloadSpec.phased`)."""
    rng = random.Random(f"{spec.seed}-{index}")
    sender = f"s{index}"
    quota = spec.messages // spec.senders + (1 if index < spec.messages % spec.senders else 0)
    grouped = round(quota * spec.grouped_fraction)
    sizes: list[int] = []
    while grouped - sum(sizes) >= 2:
        sizes.append(min(rng.randint(2, max(2, spec.max_group)), grouped - sum(sizes)))
    names = [f"{spec.run_id}-{sender}-o{i}" for i in range(len(sizes))]
    members = [(g, 0, size == 1) for g, size in zip(names, sizes, strict=True)]
    for seq in range(1, max(sizes, default=1) - 1):
        members += [(g, seq, False) for g, size in zip(names, sizes, strict=True) if seq < size - 1]
    members += [(g, size - 1, True) for g, size in zip(names, sizes, strict=True) if size > 1]
    ordinary = quota - len(members)
    every = len(members) / ordinary if ordinary > 0 else 0.0
    out: list[tuple[str | None, int, bool]] = []
    due = 0.0
    for m in members:
        out.append(m)
        due += 1
        while ordinary > 0 and due >= every:
            out.append((None, 0, False))
            ordinary -= 1
            due -= every
    out += [(None, 0, False)] * ordinary
    for n, (group, seq, final) in enumerate(out):
        ctx = {"sender": sender, "rng": rng, "headers": []}
        yield Sent(f"{spec.run_id}-{sender}-{n}", group, seq, final, None, False, None), ctx


def plan(spec: WorkloadSpec, index: int) -> Iterator[tuple[Sent, dict[str, Any]]]:
    """One sender's messages in send order: (what the verifier expects, how to build it:
    `ctx["headers"]`, the QoS headers)."""
    if spec.phased:
        yield from phased(spec, index)
        return
    rng = random.Random(f"{spec.seed}-{index}")
    extra = random.Random(f"{spec.seed}-{index}-qos")  # QoS draws: the plan stays the same
    ranks = random.Random(f"{spec.seed}-{index}-priority")  # and the priority draws
    first: dict[str, int] = {}  # open group in the priority share -> its first's priority
    kinds = random.Random(f"{spec.seed}-{index}-kind")  # whole and logical groups' draws
    whole: set[str] = set()  # open groups with whole-group delivery
    shares = spec.multicast_fraction > 0 or spec.expiring_fraction > 0
    sender = f"s{index}"
    quota = spec.messages // spec.senders + (1 if index < spec.messages % spec.senders else 0)
    open_groups: dict[str, list[int]] = {}  # group -> [next seq, size]
    # The grouped fraction holds over the whole quota: the slots not yet promised to
    # open groups are shared between the ordinary messages still due and new groups.
    ordinary_due = quota - round(quota * spec.grouped_fraction)
    n = groups = 0
    while n < quota:
        remaining = quota - n
        pending = sum(size - nxt for nxt, size in open_groups.values())
        free = remaining - pending  # slots no open group has claimed
        room_for_groups = free - ordinary_due
        if free > 0 and rng.random() * free < ordinary_due:
            group, seq, final = None, 0, False
            ordinary_due -= 1
        else:
            if len(open_groups) < spec.open_per_sender and room_for_groups > 0:
                group = f"{spec.run_id}-{sender}-o{groups}"
                groups += 1
                size = min(group_size(rng, spec.max_group), room_for_groups)
                roll = kinds.random()
                if roll < spec.logical_fraction and size > 1:
                    for sent, ctx in logical_group(group, size, n, sender, rng, kinds):
                        yield sent, ctx
                        n += 1
                    continue
                if roll < spec.logical_fraction + spec.whole_fraction:
                    whole.add(group)
                open_groups[group] = [0, size]
            else:
                group = rng.choice(sorted(open_groups))
            seq, size = open_groups[group]
            final = seq == size - 1
            open_groups[group][0] += 1
            if final:
                del open_groups[group]
        event_id = f"{spec.run_id}-{sender}-{n}"
        is_whole = group in whole
        headers, targets, expires = (
            qos(spec, extra, event_id, group, final) if shares else ([], None, False)
        )
        rank = ranked(spec, ranks, group, seq, first) if spec.priority_fraction else None
        if is_whole:  # plain: no lifetime, no priority (the draws above keep the plan)
            headers, targets, expires, rank = [], None, False, None
        if rank is not None:
            headers = [*headers, priority.header(rank)]
        if final:
            first.pop(group or "", None)
            whole.discard(group or "")
        ctx = {"sender": sender, "rng": rng, "headers": headers}
        if is_whole and seq == 0:
            ctx["delivery"] = "complete"
        yield Sent(event_id, group, seq, final, targets, expires, rank, whole=is_whole), ctx
        n += 1


def logical_group(
    group: str, size: int, n: int, sender: str, rng: random.Random, kinds: random.Random
) -> Iterator[tuple[Sent, dict[str, Any]]]:
    """A group in logical order, sent at once: its members shuffled, each to a random
    send-queue partition (`ctx["scatter"]`, taken modulo the partitions), numbered."""
    order = list(range(size))
    kinds.shuffle(order)
    for i, seq in enumerate(order):
        final = seq == size - 1
        event_id = f"{group.rsplit('-o', 1)[0]}-{n + i}"
        headers = headers_for(group, seq=seq, final=final, order="logical")
        ctx: dict[str, Any] = {
            "sender": sender,
            "rng": rng,
            "headers": headers,
            "scatter": kinds.randrange(1 << 16),
        }
        yield Sent(event_id, group, seq, final, logical=True, position=n + i), ctx
