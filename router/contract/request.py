"""One message's routing request, read from a `Sender.send()` call (pure).

A caller may pass routing headers (`router/contract/headers.py`) in `headers` itself, as a
kcat or Java user would, instead of or as well as the keyword arguments: they are read
and checked here, and the message carries each routing header once. A routing header
given twice (twice in `headers`, or in `headers` and as an argument with another value)
is an InvalidRequest (a ValueError): nothing reaches Kafka that the router would
dead-letter for it. The sender's open groups check the numbers (`router.sender.groups`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from router import contract
from router.contract.headers import RESERVED_PREFIX, RESERVED_WHY
from router.contract.multicast import check_send
from router.errors import InvalidRequest

HeaderValue = str | bytes | None
Order = Literal["lane", "logical"]


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
        raise InvalidRequest(f"header {name!r} is not valid UTF-8: {raw[:32]!r}") from None


def _agree(name: str, argument: str | None, given: dict[str, bytes | None]) -> str | None:
    """The value of `name` from the argument or the header; InvalidRequest if they differ."""
    if name not in given:
        return argument
    raw = given[name]
    text = _text(name, raw) if raw else None
    if argument is not None and text != argument:
        raise InvalidRequest(
            f"{name} given twice with different values: {argument!r} as an argument, "
            f"{text!r} in headers"
        )
    return text


def _number(name: str, text: str | None) -> int | None:
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()):
        raise InvalidRequest(f"header {name!r} must be a non-negative integer, not {text[:32]!r}")
    return int(text)


def _one_of(name: str, text: str | None, allowed: Sequence[str]) -> str | None:
    if text is not None and text not in allowed:
        raise InvalidRequest(f"header {name!r} must be one of {tuple(allowed)}, not {text[:32]!r}")
    return text


def _final(argument: bool, given: dict[str, bytes | None]) -> bool:
    if contract.FINAL not in given:
        return argument
    raw = given[contract.FINAL] or b""
    text = _text(contract.FINAL, raw).lower()
    if text not in ("true", "false", "1", "0"):
        raise InvalidRequest(f"header {contract.FINAL!r} must be true or false, not {raw[:32]!r}")
    flag = text in ("true", "1")
    if argument and not flag:
        raise InvalidRequest(f"final=True as an argument, but {contract.FINAL}: {text} in headers")
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
    """Read one `send()` call; InvalidRequest for a routing header given twice or malformed."""
    given: dict[str, bytes | None] = {}
    others: list[tuple[str, HeaderValue]] = []
    for name, value in headers:
        if name in contract.SEGMENT_HEADERS:
            raise InvalidRequest(
                f"header {name!r} is the sender's to set: it segments large payloads"
            )
        if name not in contract.ROUTING_HEADERS:
            others.append((name, value))
        elif name in given:
            raise InvalidRequest(f"header {name!r} appears more than once in headers")
        else:
            given[name] = _bytes(value)
            if name not in READ:
                others.append((name, value))  # checked once, sent as it is
    gid = _agree(contract.GUARANTEE_ID, guarantee_id, given) or None
    if gid is not None and gid.startswith(RESERVED_PREFIX):
        raise InvalidRequest(f"{RESERVED_WHY}: {gid[:64]!r}")
    check_send(others, gid)  # passed on as they are, once checked
    is_final = _final(final, given)
    if is_final and gid is None:
        raise InvalidRequest("an ordinary message (no guarantee ID) cannot be final")
    seq = _number(contract.SEQ, _agree(contract.SEQ, None, given))
    if seq is not None and gid is None:
        raise InvalidRequest(f"{contract.SEQ!r} on a message without a guarantee ID")
    ttl = _number(contract.TTL_MS, _agree(contract.TTL_MS, None, given))
    if ttl is not None and ttl_ms is not None and ttl != ttl_ms:
        raise InvalidRequest(
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
