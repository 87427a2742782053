"""The demo domain of the Spark jobs: business records in, Avro messages out.

Business records arrive as JSON lines, one record per line, `type` saying what it is:

* `purchase_order`: `order_id`, `customer_id`, `currency`, `lines` (`sku`, `quantity`,
  `unit_price_cents`). Its lines are one group, guarantee ID `po/<order_id>`: one
  consumer must process them together and in line order (PurchaseOrderLine.avsc).
* `document`: `document_id`, `name`, `content_base64`. One ordinary message (Document.avsc);
  a document larger than `segment_bytes` travels as segments of the router's contract
  (`router.contract.segments`: a group of its own whose guarantee ID is its segment ID), which the
  receiver reassembles and checks against their length and SHA-256.
* `stock_update`: `update_id`, `sku`, `warehouse`, `delta`. An ordinary message with no
  group, free to go anywhere (StockUpdate.avsc).

Every message carries a `record_id` in its payload, derived from the business key
(`<order_id>/<line_no>`, `<document_id>`, `<update_id>`), so a replayed
micro-batch produces the very same messages and a checker needs no router header to
count what was lost or duplicated. `expected_messages` is the plain-Python statement of
which messages a record becomes; the tests and the demo check the Spark sender against it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any, NamedTuple

from router.contract import schemas, segments

PURCHASE_ORDER = "purchase_order"
DOCUMENT = "document"
STOCK_UPDATE = "stock_update"
RECORD_TYPES = (PURCHASE_ORDER, DOCUMENT, STOCK_UPDATE)

ORDER_LINE = "router.demo.PurchaseOrderLine"
DOCUMENT_MESSAGE = "router.demo.Document"
STOCK = "router.demo.StockUpdate"
PAYLOAD_SCHEMAS = {PURCHASE_ORDER: ORDER_LINE, DOCUMENT: DOCUMENT_MESSAGE, STOCK_UPDATE: STOCK}

ORDER_PREFIX = "po/"
# Every message of the demo also carries its creation time (ms since the epoch, the
# payload's `created_at`) in this header: the receiver's event time for a record it
# cannot decode alone (a segment), and what the demo's checks date a segment by.
CREATED_HEADER = "created-ms"

# The JSON lines the sender reads (Spark needs the schema of a streaming file source).
INPUT_SCHEMA = (
    "type STRING, order_id STRING, customer_id STRING, currency STRING, "
    "lines ARRAY<STRUCT<sku: STRING, quantity: INT, unit_price_cents: BIGINT>>, "
    "document_id STRING, name STRING, content_base64 STRING, "
    "update_id STRING, sku STRING, warehouse STRING, delta INT, "
    "_corrupt_record STRING"
)

DEFAULT_SEGMENT_BYTES = 64 * 1024  # of the Avro-encoded document
MIN_SEGMENT_BYTES = segments.MIN_SEGMENT_BYTES
MAX_SEGMENT_BYTES = segments.DEFAULT_SEGMENT_BYTES  # well under the 1 MiB record limit


class Expected(NamedTuple):
    """A message the sender must emit: its payload's record ID, group, seq, final flag."""

    record_id: str
    group: str | None
    seq: int
    final: bool


def avro_json(name: str) -> str:
    """The schema `name` from `schemas/` as JSON, for Spark's from_avro/to_avro."""
    return schemas.json_schema(name)


def order_group(order_id: str) -> str:
    return ORDER_PREFIX + order_id


def expected_messages(record: dict[str, Any], segment_bytes: int = 0) -> list[Expected]:
    """The messages the sender must emit for one valid business record, in send order
    (a document is one message: its segments are the contract's, not the domain's)."""
    kind = record["type"]
    if kind == PURCHASE_ORDER:
        n = len(record["lines"])
        gid = order_group(record["order_id"])
        return [Expected(f"{record['order_id']}/{i}", gid, i, i == n - 1) for i in range(n)]
    if kind == DOCUMENT:  # one message, however many segments it travels in
        base64.b64decode(record["content_base64"], validate=True)
        return [Expected(record["document_id"], None, 0, False)]
    if kind == STOCK_UPDATE:
        return [Expected(record["update_id"], None, 0, False)]
    raise ValueError(f"unknown record type {kind!r}")


def expected_from_lines(lines: Iterable[str], segment_bytes: int = 0) -> list[Expected]:
    return [
        m
        for line in lines
        if line.strip()
        for m in expected_messages(json.loads(line), segment_bytes)
    ]
