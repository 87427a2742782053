"""A management table's outboxes (Redis lists): the swept entries whose AbandonedGroup
events, and the wait time-outs whose GroupWaitTimedOut events, the sweeper has not had
acknowledged by Kafka yet (`router.sweeper.publish`). The scripts that remove an entry or
end a wait append the item in the same call; the sweeper reads the head, publishes, and
drops only the items still at the head as it read them (`acked.lua`), so that several
sweepers at once may publish an event twice, never drop one unpublished. Mixed into
`router.table.store.management.ManagementTable`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from router.table.routing import Swept
from router.table.store.codec import TableKeys, outbox_item, script
from router.table.store.codec import text as _text


def wait_item(raw: bytes | str) -> tuple[int, int, str, str]:
    """'<now>|<max wait>|<outcome>|<gid>' (the gid last: it may hold '|')."""
    now, max_wait, outcome, gid = _text(raw).split("|", 3)
    return int(now), int(max_wait), outcome, gid


class OutboxTable:
    keys: TableKeys
    _r: Any

    def items(self, key: str, limit: int) -> list[bytes]:
        """The first `limit` items of an outbox list, as stored."""
        return list(self._r.lrange(key, 0, limit - 1))

    def acked(self, key: str, items: Sequence[bytes]) -> int:
        """Drop `items` (read from the head of `key`, their events published) as far as they
        are still at the head; how many were dropped."""
        if not items:
            return 0
        ack = self.__dict__.get("_acked")
        if ack is None:  # registered on first use: only the sweeper calls it
            ack = self.__dict__["_acked"] = self._r.register_script(script("acked"))
        return int(ack(keys=[key], args=list(items)))

    def outbox(self, limit: int) -> list[Swept]:
        """The oldest swept entries whose abandoned-group events are not yet published."""
        return [outbox_item(raw) for raw in self.items(self.keys.outbox, limit)]

    def ack_outbox(self, count: int) -> None:
        """Drop the first `count` outbox items, read and published by the caller alone
        (tests, tools; the sweeper uses `acked`)."""
        self.acked(self.keys.outbox, self.items(self.keys.outbox, count))

    def waits_out(self, limit: int) -> list[tuple[int, int, str, str]]:
        """The oldest wait time-outs whose events Kafka has not acknowledged yet
        (`wait_item`)."""
        return [wait_item(raw) for raw in self.items(self.keys.waits_out, limit)]
