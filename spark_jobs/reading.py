"""Reading the router's queues in Spark: Kafka records with their headers parsed.

`read_router_queues` and `with_routing` (re-exported by `spark_jobs.api`) give every
record its routing headers (`router.contract`), its segment headers (`router.contract.segments`,
checked here as the units check them: `segment_problem`), its lifetime
(`router.contract.lifetime`: `expires_ms`, `on_expiry`) and whether it is a multicast copy
(`router.table.multicast`). The header names come from those modules; the checks are Spark
expressions, so that executors need nothing of the router.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from router import contract
from router.contract import lifetime, multicast, segments

# What the router needs from a reader of its queues; a caller's option wins.
SOURCE_DEFAULTS: Mapping[str, str] = {
    "startingOffsets": "earliest",
    "includeHeaders": "true",
    "kafka.isolation.level": "read_committed",
    "failOnDataLoss": "true",
}
_SUBSCRIPTIONS = ("subscribe", "subscribePattern", "assign")
_TRUE, _FALSE = ("true", "1"), ("false", "0")


def source_options(queues: Sequence[str], options: Mapping[str, Any]) -> dict[str, str]:
    """The Kafka source options: the defaults, then every caller option unchanged, then
    `subscribe` to `queues` (unless the caller subscribes otherwise)."""
    merged = {**SOURCE_DEFAULTS, **{k: str(v) for k, v in options.items()}}
    if merged["includeHeaders"].lower() != "true":
        raise ValueError("the routing headers are needed: includeHeaders cannot be turned off")
    chosen = [name for name in _SUBSCRIPTIONS if name in merged]
    if queues:
        if chosen:
            raise ValueError(f"queues given and {chosen[0]} too: choose one")
        merged["subscribe"] = ",".join(queues)
    elif not chosen:
        raise ValueError("no queues: give queues, subscribePattern or assign")
    return merged


# Headers are looked up by position in the array of their keys, never with a lambda: a
# higher-order function (`filter`) is interpreted, not compiled, and reading a dozen
# headers that way per record was the largest CPU cost of the Spark jobs (issue 16).


def _lookup(keys: Column, values: Column, name: str) -> Column:
    at = F.array_position(keys, F.lit(name)).cast("int")
    return F.when(at > 0, F.element_at(values, at))


def _count(keys: Column, name: str) -> Column:
    every = F.coalesce(F.size(keys), F.lit(0))
    return every - F.coalesce(F.size(F.array_remove(keys, F.lit(name))), F.lit(0))


def header_bytes(name: str) -> Column:
    """The value of header `name` (the first, if repeated) as bytes, or null."""
    return _lookup(F.col("headers.key"), F.col("headers.value"), name)


def header_value(name: str) -> Column:
    """The value of header `name` (the first, if repeated) as a string, or null."""
    return header_bytes(name).cast("string")


def header_count(name: str) -> Column:
    """How many times header `name` is there (0 on a record without headers)."""
    return _count(F.col("headers.key"), name)


class Headers:
    """How the checks below read headers: straight from the `headers` column (as the
    public functions above), or `Stored`."""

    def bytes(self, name: str) -> Column:
        return header_bytes(name)

    def value(self, name: str) -> Column:
        return self.bytes(name).cast("string")

    def count(self, name: str) -> Column:
        return header_count(name)


def _stored_name(name: str, kind: str) -> str:
    return f"_{kind}_" + name.replace("-", "_")


class Stored(Headers):
    """Headers looked up once per record into columns of their own (`with_routing`): the
    checks refer to each many times, and inlined into one compiled method the lookups
    grew past the JVM's 64 KB limit for a method (Spark then fell back to slower code
    and logged the failure on every micro-batch)."""

    def bytes(self, name: str) -> Column:
        return F.col(_stored_name(name, "h"))

    def count(self, name: str) -> Column:
        return F.col(_stored_name(name, "n"))


_LOOKED_UP = sorted(
    {
        contract.GUARANTEE_ID,
        contract.SEQ,
        contract.FINAL,
        contract.MESSAGE_TYPE,
        contract.DELIVERY,
        multicast.DELIVERY,
    }
    | segments.HEADERS
    | lifetime.HEADERS
)
_COUNTED = sorted(segments.HEADERS | lifetime.HEADERS)


def _whole_number(raw: Column, digits: int) -> Column:
    """`raw` (a string) as a bigint if it is 1..`digits` decimal digits, else null."""
    return F.when(raw.rlike(f"^[0-9]{{1,{digits}}}$"), raw.try_cast("bigint"))


def segment_columns(h: Headers | None = None) -> list[Column]:
    """`segment_id`, `segment_index`, `segment_last`, `segment_bytes`, `segment_sha256` of
    a segment (all null on a record that is not one), and `segment_problem`: why its
    segment headers are malformed, as `router.contract.segments.problem` says (null: fine)."""
    h = h or Headers()
    sid, index = h.bytes(contract.SEGMENT_ID), h.value(contract.SEGMENT_INDEX)
    flag = F.lower(h.value(contract.SEGMENT_LAST))
    total, digest = h.value(contract.SEGMENT_BYTES), h.value(contract.SEGMENT_SHA256)
    last = F.coalesce(flag.isin(*_TRUE), F.lit(False))
    n_index = _whole_number(index, len(str(segments.MAX_SEGMENTS - 1)))
    n_total = _whole_number(total, len(str(segments.MAX_TOTAL_BYTES)))
    gid, final = h.value(contract.GUARANTEE_ID), h.value(contract.FINAL)
    is_final = F.coalesce(F.lower(final).isin(*_TRUE), F.lit(False))
    names = sorted(segments.HEADERS)
    present = F.greatest(*[h.count(n) for n in names]) > 0
    twice = F.coalesce(*[F.when(h.count(n) > 1, F.lit(n)) for n in names])
    bad = (
        F.when(twice.isNotNull(), F.format_string("header '%s' appears more than once", twice))
        .when(sid.isNull(), F.lit(f"a segment header without '{contract.SEGMENT_ID}'"))
        .when(
            ~F.octet_length(sid).between(1, segments.MAX_ID_BYTES),
            F.lit(f"{contract.SEGMENT_ID} must be 1..{segments.MAX_ID_BYTES} bytes"),
        )
        .when(~F.is_valid_utf8(sid.cast("string")), F.lit(f"{contract.SEGMENT_ID} is not UTF-8"))
        .when(index.isNull(), F.lit(f"{contract.SEGMENT_INDEX} is missing"))
        .when(
            n_index.isNull() | (n_index >= segments.MAX_SEGMENTS),
            F.lit(f"{contract.SEGMENT_INDEX} is not an integer in 0..{segments.MAX_SEGMENTS - 1}"),
        )
        .when(
            flag.isNotNull() & ~flag.isin(*_TRUE, *_FALSE),
            F.lit(f"{contract.SEGMENT_LAST} is not true/false"),
        )
        .when(
            ~last & (total.isNotNull() | digest.isNotNull()),
            F.lit(
                f"{contract.SEGMENT_BYTES} or {contract.SEGMENT_SHA256} on a segment not the last"
            ),
        )
        .when(
            total.isNotNull() & (n_total.isNull() | (n_total > segments.MAX_TOTAL_BYTES)),
            F.lit(f"{contract.SEGMENT_BYTES} is not an integer in 0..{segments.MAX_TOTAL_BYTES}"),
        )
        .when(
            last & (total.isNull() | digest.isNull()),
            F.lit(f"the last segment needs {contract.SEGMENT_BYTES} and {contract.SEGMENT_SHA256}"),
        )
        .when(
            last & ~digest.rlike("^[0-9a-fA-F]{64}$"),
            F.lit(f"{contract.SEGMENT_SHA256} is not 64 hexadecimal digits"),
        )
        .when(gid.isNull(), F.lit("a segment travels in a group: it needs a guarantee-id"))
        .when(
            is_final & ~last, F.lit("guarantee-final on a segment that is not its message's last")
        )
        .when(
            (gid == sid.cast("string")) & last & ~is_final,
            F.lit("the last segment of an ordinary message (guarantee-id = segment-id) is final"),
        )
    )
    ok = present & bad.isNull()
    return [
        F.when(ok, sid.cast("string")).alias("segment_id"),
        F.when(ok, n_index.cast("int")).alias("segment_index"),
        F.when(ok, last).alias("segment_last"),
        F.when(ok & last, n_total).alias("segment_bytes"),
        F.when(ok & last, F.lower(digest)).alias("segment_sha256"),
        F.when(present, F.concat(F.lit("bad-segment: "), bad)).alias("segment_problem"),
    ]


def lifetime_columns(h: Headers | None = None) -> list[Column]:
    """`expires_ms` (the instant the message expires, ms since the epoch, or null: the
    earliest of `message-expires-at`, `router-expires-at` and the record's timestamp plus
    `message-lifetime-ms`), `on_expiry` (`message-on-expiry` as sent) and
    `lifetime_problem` (a malformed or repeated lifetime header, as the units'
    `bad-lifetime`; the bounds of a relative lifetime are the router's to check)."""
    h = h or Headers()
    digits = lifetime.MAX_DIGITS
    at = _whole_number(h.value(lifetime.EXPIRES_AT), digits)
    stamped = _whole_number(h.value(lifetime.ROUTER_EXPIRES_AT), digits)
    relative = _whole_number(h.value(lifetime.LIFETIME_MS), digits)
    on_expiry = h.value(lifetime.ON_EXPIRY)
    names = sorted(lifetime.HEADERS)
    twice = F.coalesce(*[F.when(h.count(n) > 1, F.lit(n)) for n in names])
    numbers = [
        (lifetime.EXPIRES_AT, at),
        (lifetime.ROUTER_EXPIRES_AT, stamped),
        (lifetime.LIFETIME_MS, relative),
    ]
    problem = F.when(
        twice.isNotNull(), F.format_string("header '%s' appears more than once", twice)
    )
    for name, number in numbers:
        problem = problem.when(
            h.value(name).isNotNull() & number.isNull(),
            F.lit(f"{name} is not a whole number of milliseconds"),
        )
    problem = problem.when(
        F.greatest(at, stamped, relative) > F.lit(lifetime.MAX_INSTANT_MS),
        F.lit(f"a lifetime header beyond {lifetime.MAX_INSTANT_MS} ms"),
    ).when(
        on_expiry.isNotNull() & ~on_expiry.isin(*lifetime.ON_EXPIRY_VALUES),
        F.lit(f"{lifetime.ON_EXPIRY} is not one of {', '.join(lifetime.ON_EXPIRY_VALUES)}"),
    )
    expires = F.least(at, stamped, F.try_add(F.unix_millis(F.col("timestamp")), relative))
    return [
        F.when(problem.isNull(), expires).alias("expires_ms"),
        on_expiry.alias("on_expiry"),
        F.concat(F.lit(f"{lifetime.BAD}: "), problem).alias("lifetime_problem"),
    ]


def with_routing(kafka: Any) -> Any:
    """Records of Spark's Kafka source (with headers) -> `queue`, `partition`, `offset`,
    `timestamp`, `key`, `value`, `headers` (all of them, raw), and the headers parsed:
    `guarantee_id`, `seq` (null if absent or not a number; `raw_seq` as sent), `final`,
    `message_type`, `delivery` (`guarantee-delivery` as sent), `multicast` (a copy of a
    `message-delivery: multicast` message), the segment columns (`segment_columns`) and
    the lifetime columns (`lifetime_columns`)."""
    # Each header looked up once per record (`Stored`), from its keys and values taken
    # out of the structs once (`coalesce`: not inlined into every use).
    keys = F.coalesce(F.col("headers.key"), F.array().cast("array<string>"))
    values = F.coalesce(F.col("headers.value"), F.array().cast("array<binary>"))
    split = kafka.select("*", keys.alias("_hk"), values.alias("_hv"))
    looked_up = split.select(
        "*",
        *[_lookup(F.col("_hk"), F.col("_hv"), n).alias(_stored_name(n, "h")) for n in _LOOKED_UP],
        *[_count(F.col("_hk"), n).alias(_stored_name(n, "n")) for n in _COUNTED],
    )
    h = Stored()
    raw_seq = h.value(contract.SEQ)
    final = h.value(contract.FINAL).isin("true", "1", "True", "TRUE")
    is_multicast = h.value(multicast.DELIVERY) == F.lit(multicast.MULTICAST)
    return looked_up.select(
        F.col("topic").alias("queue"),
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
        "headers",
        h.value(contract.GUARANTEE_ID).alias("guarantee_id"),
        raw_seq.alias("raw_seq"),
        raw_seq.try_cast("bigint").alias("seq"),
        F.coalesce(final, F.lit(False)).alias("final"),
        h.value(contract.MESSAGE_TYPE).alias("message_type"),
        h.value(contract.DELIVERY).alias("delivery"),
        F.coalesce(is_multicast, F.lit(False)).alias("multicast"),
        *segment_columns(h),
        *lifetime_columns(h),
    )


def read_router_queues(
    spark: Any, queues: Sequence[str], *, streaming: bool = True, **options: Any
) -> Any:
    """The messages on `queues`, with their headers parsed (see `with_routing`).
    Pass Kafka source options as keywords: `**{"kafka.bootstrap.servers": ...}`,
    `maxOffsetsPerTrigger=...`, `groupIdPrefix=...`; `streaming=False` reads a batch."""
    reader = spark.readStream if streaming else spark.read
    return with_routing(reader.format("kafka").options(**source_options(queues, options)).load())
