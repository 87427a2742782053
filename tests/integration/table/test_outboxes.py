"""The tables' outboxes with several sweepers at once (`router/table/store/outboxes.py`,
`acked.lua`): a sweeper drops only the items still at the head as it read them, so two
sweepers that read the same items may publish an event twice, never drop one unpublished.
Against the real Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from router.table.store.management import ManagementTable, TableKeys
from tests.fixtures.helpers import unique


@pytest.fixture
def table(redis_client: redis.Redis) -> Iterator[ManagementTable]:
    t = ManagementTable(redis_client, TableKeys.of(unique("outbox"), "t", "send"), ["d0"])
    yield t
    t.drop()


def fill(t: ManagementTable, n: int) -> list[bytes]:
    items = [b"e%d" % i for i in range(n)]
    t._r.rpush(t.keys.waits_out, *items)
    return items


def test_two_sweepers_that_read_the_same_batch_drop_it_once(table: ManagementTable) -> None:
    """A backlog of 1,500 after an outage: both sweepers read the first 500 and publish
    them; the second's ack finds the next 500 at the head and leaves them. (Trimmed by
    count, the second dropped items 500 to 999 unpublished.)"""
    key = table.keys.waits_out
    items = fill(table, 1_500)
    a, b = table.items(key, 500), table.items(key, 500)
    assert table.acked(key, a) == 500
    assert table.acked(key, b) == 0
    assert table.items(key, 2_000) == items[500:]


def test_an_item_kept_by_a_failed_flush_survives_a_slower_sweepers_ack(
    table: ManagementTable,
) -> None:
    """B read e0 and is slow; A publishes e0 and drops it, then reads e1 and its flush
    fails, so e1 is kept; B's ack of e0 then finds e1 at the head and leaves it."""
    key = table.keys.waits_out
    fill(table, 1)
    b = table.items(key, 500)
    assert table.acked(key, table.items(key, 500)) == 1  # A
    table._r.rpush(key, b"e1")
    assert table.items(key, 500) == [b"e1"]  # A's next batch, not acknowledged: kept
    assert table.acked(key, b) == 0
    assert table.items(key, 500) == [b"e1"]


def test_a_partly_published_head_is_dropped_as_far_as_it_matches(table: ManagementTable) -> None:
    key = table.keys.waits_out
    items = fill(table, 3)
    read = table.items(key, 2)
    assert table.acked(key, items[:1]) == 1  # another sweeper dropped e0 meanwhile
    assert table.acked(key, read) == 0  # e1 is left: published again, never lost
    assert table.items(key, 10) == items[1:]
    assert table.acked(key, []) == 0
