"""What `Sender.send` is asked to send, and its open groups' lanes and numbers (pure).

A caller may pass routing headers (`router/contract.py`) in `headers` itself, as a
kcat or Java user would, instead of or as well as the keyword arguments: they are read
and checked here, and the message carries each routing header once. A routing header
given twice (twice in `headers`, or in `headers` and as an argument with another value)
is a ValueError, and so is a `guarantee-seq` that is not the number the group expects:
nothing reaches Kafka that the router would dead-letter for it.

A caller's own `guarantee-seq` must be, in the default lane order, the group's next
number in this sender (0 for a group this sender has not opened); in logical order
(`guarantee-order: logical`, or the router's `routing.default_order`), any number this
sender has not sent in the group yet, since several senders may each send a part of one
group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from router import contract, multicast

TP = tuple[str, int]
HeaderValue = str | bytes | None
Order = Literal["lane", "logical"]


class DeliveryFailed(Exception):
    """Messages Kafka did not acknowledge; they were not sent."""

    def __init__(self, failures: Sequence[str]) -> None:
        super().__init__(f"{len(failures)} messages not delivered: {'; '.join(failures[:5])}")
        self.failures = list(failures)


@dataclass(frozen=True, slots=True)
class SendReceipt:
    """Where `Sender.send` put a message: its send-queue partition and its number in its
    group (None for an ordinary message). A segmented message (`router.segments`) took
    `segments` numbers from `seq` on, and has the ID `segment_id`."""

    topic: str
    partition: int
    seq: int | None
    segments: int = 1
    segment_id: str | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """One message's routing, read from `send()`'s arguments and the caller's headers."""

    guarantee_id: str | None
    final: bool
    seq: int | None  # the caller's own number, if it gave one
    logical: bool
    message_type: str | None
    ttl_ms: int | None
    on_poison: str | None
    delivery: str | None
    order: str | None  # as the caller's header said (None: not said)
    others: list[tuple[str, HeaderValue]]  # the caller's other headers, in order


# The routing headers `request` reads; any other one a caller gives is passed on as it is.
READ = frozenset(
    {
        contract.GUARANTEE_ID,
        contract.FINAL,
        contract.SEQ,
        contract.MESSAGE_TYPE,
        contract.TTL_MS,
        contract.ON_POISON,
        contract.DELIVERY,
        contract.ORDER,
    }
)


def _bytes(value: HeaderValue) -> bytes | None:
    return value.encode("utf-8") if isinstance(value, str) else value


def _text(name: str, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"header {name!r} is not valid UTF-8: {raw[:32]!r}") from None


def _agree(name: str, argument: str | None, given: dict[str, bytes | None]) -> str | None:
    """The value of `name` from the argument or the header; ValueError if they differ."""
    if name not in given:
        return argument
    raw = given[name]
    text = _text(name, raw) if raw else None
    if argument is not None and text != argument:
        raise ValueError(
            f"{name} given twice with different values: {argument!r} as an argument, "
            f"{text!r} in headers"
        )
    return text


def _number(name: str, text: str | None) -> int | None:
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"header {name!r} must be a non-negative integer, not {text[:32]!r}")
    return int(text)


def _one_of(name: str, text: str | None, allowed: Sequence[str]) -> str | None:
    if text is not None and text not in allowed:
        raise ValueError(f"header {name!r} must be one of {tuple(allowed)}, not {text[:32]!r}")
    return text


def _final(argument: bool, given: dict[str, bytes | None]) -> bool:
    if contract.FINAL not in given:
        return argument
    raw = given[contract.FINAL] or b""
    text = _text(contract.FINAL, raw).lower()
    if text not in ("true", "false", "1", "0"):
        raise ValueError(f"header {contract.FINAL!r} must be true or false, not {raw[:32]!r}")
    flag = text in ("true", "1")
    if argument and not flag:
        raise ValueError(f"final=True as an argument, but {contract.FINAL}: {text} in headers")
    return flag


def request(
    headers: Sequence[tuple[str, HeaderValue]],
    *,
    guarantee_id: str | None,
    final: bool,
    message_type: str | None,
    ttl_ms: int | None,
    delivery: str | None,
    default_order: Order = "lane",
) -> Request:
    """Read one `send()` call; ValueError for a routing header given twice or malformed."""
    given: dict[str, bytes | None] = {}
    others: list[tuple[str, HeaderValue]] = []
    for name, value in headers:
        if name in contract.SEGMENT_HEADERS:
            raise ValueError(f"header {name!r} is the sender's to set: it segments large payloads")
        if name not in contract.ROUTING_HEADERS:
            others.append((name, value))
        elif name in given:
            raise ValueError(f"header {name!r} appears more than once in headers")
        else:
            given[name] = _bytes(value)
            if name not in READ:
                others.append((name, value))  # checked once, sent as it is
    gid = _agree(contract.GUARANTEE_ID, guarantee_id, given) or None
    multicast.check_send(others, gid)  # passed on as they are, once checked
    is_final = _final(final, given)
    if is_final and gid is None:
        raise ValueError("an ordinary message (no guarantee ID) cannot be final")
    seq = _number(contract.SEQ, _agree(contract.SEQ, None, given))
    if seq is not None and gid is None:
        raise ValueError(f"{contract.SEQ!r} on a message without a guarantee ID")
    ttl = _number(contract.TTL_MS, _agree(contract.TTL_MS, None, given))
    if ttl is not None and ttl_ms is not None and ttl != ttl_ms:
        raise ValueError(
            f"{contract.TTL_MS} given twice with different values: {ttl_ms} as an argument, "
            f"{ttl} in headers"
        )
    chosen = _agree(contract.DELIVERY, delivery, given)
    order = _one_of(contract.ORDER, _agree(contract.ORDER, None, given), contract.ORDERS)
    return Request(
        guarantee_id=gid,
        final=is_final,
        seq=seq,
        logical=(order or default_order) == "logical",
        message_type=_agree(contract.MESSAGE_TYPE, message_type, given),
        ttl_ms=ttl_ms if ttl is None else ttl,
        on_poison=_one_of(
            contract.ON_POISON, _agree(contract.ON_POISON, None, given), contract.POISON_POLICIES
        ),
        delivery=_one_of(contract.DELIVERY, chosen, contract.DELIVERIES),
        order=order,
        others=others,
    )


def routing_headers(r: Request, seq: int | None) -> list[tuple[str, bytes]]:
    """The routing headers the message carries, each once (`seq`: its number)."""
    grouped = r.guarantee_id is not None
    return contract.headers_for(
        r.guarantee_id,
        final=r.final,
        seq=seq,
        message_type=r.message_type,
        ttl_ms=r.ttl_ms,
        on_poison=r.on_poison,
        delivery=r.delivery if grouped else None,
        order=r.order,
    )


@dataclass
class OpenGroup:
    """One open group: its partition, next number and last use (`time.monotonic()`)."""

    tp: TP  # the send-queue partition the group is pinned to
    next_seq: int
    last_used: float
    logical: bool = False
    sent: set[int] = field(default_factory=set)  # logical order: the numbers sent
    opened: float = 0.0  # `time.monotonic()` when this sender opened (or resumed) it


class OpenGroups:
    """This sender's open groups: each one's partition and next sequence number. A group
    idle longer than `max_idle_s` (the longest TTL: the router has forgotten it) is
    forgotten once more than `limit` groups are open."""

    def __init__(self, max_idle_s: float, limit: int = 10_000) -> None:
        self.max_idle_s = max_idle_s
        self.limit = limit
        self._open: dict[str, OpenGroup] = {}

    def place(self, r: Request, now: float, new_lane: Callable[[], TP]) -> tuple[TP, int]:
        """The partition and sequence number of grouped message `r` (`new_lane()` picks a
        partition for a group not open yet). ValueError, with nothing changed, if the
        caller's number is not one the group can take."""
        gid = r.guarantee_id
        assert gid is not None, "an ordinary message has no group"
        group = self._open.get(gid)
        logical = r.logical or (group is not None and group.logical)
        expected = group.next_seq if group is not None else 0
        seq = r.seq if r.seq is not None else expected
        if logical:
            if group is not None and seq in group.sent:
                raise ValueError(
                    f"{contract.SEQ} {seq} of group {gid!r} was already sent by this sender"
                )
        elif seq != expected:
            state = "is open" if group is not None else "is not open in this sender"
            raise ValueError(
                f"{contract.SEQ} {seq} for group {gid!r}, which {state}: its next number "
                f"is {expected} (lane order numbers a group 0, 1, 2, ... as sent)"
            )
        if group is None:
            group = self._open[gid] = OpenGroup(new_lane(), 0, now, logical, opened=now)
        group.logical = logical
        if logical:
            group.sent.add(seq)
        group.next_seq = max(group.next_seq, seq + 1)
        group.last_used = now
        if r.final:
            del self._open[gid]
        elif len(self._open) > self.limit:
            self._forget_idle(now)
        return group.tp, seq

    def _forget_idle(self, now: float) -> None:
        idle = [g for g, o in self._open.items() if now - o.last_used > self.max_idle_s]
        for g in idle:
            del self._open[g]

    def lanes(self) -> dict[str, TP]:
        """Each open group's partition."""
        return {g: o.tp for g, o in self._open.items()}

    def __contains__(self, gid: object) -> bool:
        return gid in self._open

    def groups(self) -> dict[str, OpenGroup]:
        """The open groups (read only)."""
        return dict(self._open)

    def restore(
        self, gid: str, tp: TP, next_seq: int, now: float, logical: bool, sent: set[int]
    ) -> None:
        """Open a group again as a restarted sender found it: on `tp`, numbered on from
        `next_seq` (`sent`: the numbers already on its lane, for logical order)."""
        self._open[gid] = OpenGroup(tp, next_seq, now, logical, set(sent), opened=now)

    def drop(self, gid: str) -> bool:
        """Forget a group (abandoned, or its opening failed); whether it was open."""
        return self._open.pop(gid, None) is not None
