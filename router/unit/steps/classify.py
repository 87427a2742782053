"""The classify step: consumed messages -> a batch of items with bad input marked.

Reads each message's routing headers once (`router.contract`), checks the limits a
destination enforces and, on the send side, that payloads of typed messages decode with
their Avro schema, or, for types that name a registry subject, that the framed payload's
schema ID is a version of that subject and its body decodes. A bad message keeps what is
known of its group, so that the route step can keep the group whole and its poison policy
can apply. Nothing here talks to a server but the Schema Registry, for an ID not yet in its
client's cache; the registry away, or refusing the unit (say, its credentials), fails the
batch (`batch.failure`: rewound, retried after the unit's back-off), so a payload is never
dead-lettered for a reason that is not its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from confluent_kafka import Message

from router import contract
from router.backends.registry import framing
from router.backends.registry.client import (
    RegistryClient,
    RegistryError,
    RegistryUnavailable,
    SchemaNotFound,
)
from router.config.settings import RouterSettings
from router.contract import lifetime, multicast, priority, schemas, segments
from router.contract.headers import CONTROL, BadInput
from router.table.store.management import Side
from router.unit.steps.batch import Batch, Item


def payload_validators(
    settings: RouterSettings, registry: RegistryClient | None = None
) -> dict[str, Callable[[bytes], None]]:
    """Message type -> a check that the payload decodes with the type's Avro schema, or is
    registry-framed with a version of the type's subject (`registry_check`)."""
    out: dict[str, Callable[[bytes], None]] = {}
    for message_type, name in settings.routing.schema_by_type.items():
        schemas.load(name)  # fails at start-up if the schema is missing
        out[message_type] = partial(schemas.validate, name)
    if settings.routing.subject_by_type:
        client = registry or RegistryClient(settings.registry)
        for message_type, subject in settings.routing.subject_by_type.items():
            out[message_type] = partial(registry_check, client, subject)
    return out


def registry_check(client: RegistryClient, subject: str, value: bytes) -> None:
    """BadFrame (its `reason`: unframed, unknown-id, wrong-subject, undecodable) unless
    `value` is framed with the ID of a version of `subject` and its body decodes with it.
    RegistryUnavailable if the registry cannot say."""
    schema_id, body = framing.unframe(value)
    try:
        schema = client.parsed(schema_id)
    except SchemaNotFound:
        raise framing.BadFrame(
            "unknown-id", f"schema ID {schema_id} is not in the registry"
        ) from None
    if not client.in_subject(schema_id, subject):
        raise framing.BadFrame(
            "wrong-subject", f"schema ID {schema_id} is not a version of subject {subject!r}"
        )
    framing.decode_body(schema, body)


class Classifier:
    def __init__(
        self,
        settings: RouterSettings,
        side: Side,
        rejected: dict[tuple[str, int, int], str] | None = None,
        registry: RegistryClient | None = None,
    ) -> None:
        self.rules = settings.routing
        self.max_record = settings.kafka.max_message_bytes
        # Payloads are checked where they enter the path: on the send side.
        self.validators = payload_validators(settings, registry) if side == "send" else {}
        self.side = side
        self.queues = tuple(settings.topology.receive_queues)  # multicast's targets
        self.hop = f"{side} unit"
        self.clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)
        # Source positions whose record the broker refused earlier (e.g. too large for
        # the destination topic): dead-lettered when the batch is replayed.
        self.rejected: dict[tuple[str, int, int], str] = {} if rejected is None else rejected

    def classify(self, batch: Batch, messages: list[Message]) -> None:
        rules = self.rules
        validators = self.validators
        rejected = self.rejected
        items = batch.items
        now_ms = self.clock_ms()
        max_record = self.max_record
        read_headers, parse = contract.read_headers, contract.parse  # locals: every message
        for i, m in enumerate(messages):
            tp = batch.track(m)
            try:
                headers = read_headers(m)
            except BadInput as bad:  # a header name that is not UTF-8
                items.append(Item(m, None, None, bad))
                continue
            item = Item(m, headers, None)
            try:
                r = item.routing = parse(headers, rules)
                value, key = m.value(), m.key()
                size = (len(value) if value else 0) + (len(key) if key else 0)
                control: bytes | None = None
                fan = cut = ranked = timed = False
                if headers:
                    for k, v in headers:
                        size += len(k) + (len(v) if v else 0)
                        if k == CONTROL:
                            control = v or b""
                        elif k in multicast.HEADERS:
                            fan = True
                        elif k in segments.HEADERS:
                            cut = True
                        elif k == priority.PRIORITY:
                            ranked = True
                        elif k in lifetime.HEADERS:
                            timed = True
                if control is not None:
                    if self.side == "send" or r.guarantee_id is None:
                        raise r.bad(
                            "bad-headers",
                            f"header {CONTROL!r} is reserved for the router's own "
                            "records on the transfer topic",
                        )
                    if control == contract.SKIP:
                        item.skip = True  # routed as the member it stands for
                    else:
                        item.close = True
                    items.append(item)
                    continue
                if ranked and self.side == "send":  # checked where it enters the path
                    try:
                        priority.read(headers)
                    except BadInput as malformed:
                        raise r.bad(malformed.code, malformed.detail) from None
                if cut and (why := segments.problem(headers, r.guarantee_id, r.final)):
                    raise r.bad("bad-segment", why)
                if fan:
                    assert headers is not None
                    item.targets = multicast.read(headers, self.queues, r)
                gone = self._expiry(item, r, headers, now_ms) if headers and timed else None
                if gone is not None:
                    raise gone
                if size > max_record:
                    raise r.bad(
                        "oversized",
                        f"record of {size} bytes exceeds the {max_record} bytes "
                        "a destination accepts (kafka.max_message_bytes)",
                    )
                if rejected:
                    # kept until a batch holding it commits (`forget_rejected`): a
                    # replay that fails again must dead-letter it again
                    reason = rejected.get((tp[0], tp[1], m.offset()))
                    if reason is not None:
                        raise r.bad("rejected-by-broker", reason)
                check = validators.get(r.message_type or "") if validators else None
                if check is not None:
                    try:
                        check(value or b"")
                    except (RegistryUnavailable, RegistryError) as exc:  # not the payload's fault
                        batch.failure = f"Schema Registry unavailable, nothing forwarded: {exc}"
                        for rest in messages[i + 1 :]:
                            batch.track(rest)  # rewound with the batch
                        return
                    except framing.BadFrame as exc:
                        detail = exc.detail[:500]
                        if exc.reason == "unknown-id":
                            raise r.bad("unknown-schema-id", detail) from None
                        if exc.reason == "wrong-subject":
                            raise r.bad("wrong-subject", detail) from None
                        if exc.reason == "unframed":
                            raise r.bad("unframed-payload", detail) from None
                        raise r.bad("undecodable-payload", detail) from None
                    except Exception as exc:
                        schema = rules.schema_by_type[r.message_type or ""]
                        detail = f"payload is not a {schema}: {exc}"
                        raise r.bad("undecodable-payload", detail[:500]) from None
            except BadInput as bad:
                item.bad = bad
                policy = (
                    bad.on_poison
                    or rules.poison_policy_by_type.get(bad.message_type or "")
                    or rules.poison_policy
                )
                item.stop = bad.guarantee_id is not None and policy == "stop-group"
            items.append(item)

    def _expiry(
        self, item: Item, r: contract.Routing, headers: contract.Headers, now_ms: int
    ) -> BadInput | None:
        """Read the message's lifetime (`router.contract.lifetime`) into `item.expires_ms`; the
        reason it is not forwarded if its lifetime ended. A malformed lifetime header
        raises BadInput(`bad-lifetime`) for the message's group."""
        rules = self.rules
        ts_type, ts = item.m.timestamp()
        try:
            life = lifetime.read(
                headers,
                ts if ts_type else None,
                min_lifetime_ms=rules.min_lifetime_ms,
                max_lifetime_ms=rules.max_lifetime_ms,
                default_on_expiry=rules.on_expiry,
            )
        except BadInput as malformed:
            raise r.bad(malformed.code, malformed.detail) from None
        if life is None:
            return None
        item.expires_ms = life.expires_ms
        gone = lifetime.expired_input(life, now_ms, self.hop)
        if gone is None:
            return None
        bad = r.bad(gone.code, gone.detail)
        bad.expires_ms, bad.on_expiry = life.expires_ms, life.on_expiry
        if r.guarantee_id is not None:  # its group's outcome: the poison machinery's
            bad.on_poison = "stop-group" if life.on_expiry == "expire-group" else "dead-letter"
        return bad
