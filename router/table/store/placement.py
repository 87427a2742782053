"""An operator's steering of a management table (`router.table.placement`): pinned entries and
draining destinations. Mixed into `router.table.store.management.ManagementTable`;
`router.table.steer` is the library API over it."""

from __future__ import annotations

from typing import Any

from router.errors import InvalidRequest
from router.table.store.codec import TableKeys, script
from router.table.store.codec import text as _text


class SteerTable:
    keys: TableKeys
    client: Any
    _r: Any
    destinations: list[str]

    def _check(self, dest: str) -> None:
        if dest not in self.destinations:
            raise InvalidRequest(
                f"{dest!r} is not a destination of this table: {self.destinations}"
            )

    def pin(self, gid: str, dest: str, ttl_ms: int, now_ms: int | None = None) -> bool:
        """Create a pinned entry for a group that has none (`router/table/store/lua/pin.lua`): its
        first message goes to `dest`. False (nothing changed) if the group has an entry."""
        self._check(dest)
        lua = self.__dict__.get("_pin")
        if lua is None:  # registered on first use: operators only
            lua = self.__dict__["_pin"] = self.client.register_script(script("pin"))
        k = self.keys
        return bool(
            lua(
                keys=[k.entries, k.deadlines, k.load, k.stats],
                args=["" if now_ms is None else now_ms, gid, dest, ttl_ms],
            )
        )

    def draining(self) -> set[str]:
        """Destinations marked draining (including any that are no longer destinations)."""
        return {_text(d) for d in self._r.smembers(self.keys.draining)}

    def drain(self, dest: str) -> bool:
        """Mark `dest` draining: no new group or ordinary message goes there. False if it
        already was."""
        self._check(dest)
        return bool(self._r.sadd(self.keys.draining, dest))

    def undrain(self, dest: str) -> bool:
        """End a drain (any name, so that a stale one can be removed). False if it was not
        draining. Waiting groups are admitted to it by the next route or settle call."""
        return bool(self._r.srem(self.keys.draining, dest))
