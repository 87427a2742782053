"""Which unit owns a lane, as the table sees it: a fence for zombies.

Kafka fences a unit that lost its partitions (its consumer session ended while it was
frozen, a long GC pause, a stopped VM): its transaction's offsets are refused and its
records never become visible. Nothing in Kafka fences its Redis calls. A zombie that resumes
with a batch it polled before the pause routes records that the partition's new owner
already routed and delivered: it would re-create entries and count parks in the waiting
room for groups that ended, and nobody would ever settle them.

So a unit claims each partition it is assigned (`claim`, `router/table/store/lua/owners.lua`):
the lane's token becomes larger than every one given before. Calls that change the table for
a lane (route, chained drains) carry the caller's tokens for the lanes they speak for
(`fences`), and the script refuses the whole call if any is older than the lane's latest
claim (`fenced_lane` in `prelude.lua`): `LaneFenced`, the batch is rewound, and the unit
backs off while its consumer learns it lost the partition. A settle follows a committed
transaction, which Kafka allowed, so it is not refused; only its drains, which name groups
by ID, carry the claims they were drained under and are ignored when a newer claim exists
(`router.table.store.settling`). Mixed into `router.table.store.management.ManagementTable`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from router.errors import RouterError
from router.table.store.codec import TableKeys, script
from router.table.store.codec import text as _text


class LaneFenced(RouterError):
    """A table call spoke for a lane that another unit claimed since: nothing changed."""

    def __init__(self, lane: str) -> None:
        super().__init__(
            f"lane {lane} was claimed by another unit since this one was assigned it (its "
            "consumer session ended?): the call changed nothing; the batch is rewound"
        )
        self.lane = lane


FENCED = -1  # the first value of a script's reply when the call was fenced


class OwnersTable:
    keys: TableKeys
    client: Any

    @property
    def claims(self) -> dict[str, str]:
        """Lane -> the token of this caller's claim on it."""
        claims: dict[str, str] | None = self.__dict__.get("_claims")
        if claims is None:
            claims = self.__dict__["_claims"] = {}
        return claims

    def claim(self, lanes: Iterable[str]) -> dict[str, str]:
        """Claim `lanes` (just assigned to this caller): calls with an older claim's token
        are refused from now on. One round trip; the new tokens."""
        wanted = sorted(set(lanes))
        if not wanted:
            return {}
        lua = self.__dict__.get("_owners")
        if lua is None:
            lua = self.__dict__["_owners"] = self.client.register_script(script("owners"))
        tokens = [_text(t) for t in lua(keys=[self.keys.owners], args=wanted)]
        got = dict(zip(wanted, tokens, strict=True))
        self.claims.update(got)
        return got

    def disclaim(self, lanes: Iterable[str]) -> None:
        """Forget this caller's claims on `lanes` (revoked): nothing is written, the next
        owner's claim fences them."""
        claims = self.claims
        for lane in lanes:
            claims.pop(lane, None)

    def unclaimed(self, lanes: Iterable[str]) -> set[str]:
        """The lanes of `lanes` this caller holds no claim on."""
        claims = self.claims
        return {lane for lane in lanes if lane not in claims}

    def fences(self, lanes: Iterable[str]) -> list[str]:
        """A script's fence arguments for the claimed lanes of `lanes`: n, then lane,
        token pairs. Lanes this caller never claimed are not fenced (tests and tools
        that call the table directly)."""
        claims = self.claims
        return fence_args({lane: claims[lane] for lane in lanes if lane in claims})

    def owners(self) -> dict[str, str]:
        """Lane -> the token of its latest claim (operators, tests)."""
        return {_text(k): _text(v) for k, v in self.client.hgetall(self.keys.owners).items()}


def fence_args(claims: Mapping[str, str]) -> list[str]:
    """A script's fence arguments for lanes and the caller's claim tokens on them: n, then
    lane, token pairs, in lane order (`fenced_lane` in `prelude.lua`)."""
    out: list[str] = []
    for lane, token in sorted(claims.items()):
        out += (lane, token)
    return [str(len(out) // 2), *out]
