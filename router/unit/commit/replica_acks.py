"""How many Redis replicas must hold a batch's table writes before its transaction may
commit (`redis.min_replica_acks`): the rule alone, no I/O (`router.unit.commit.replicawait` asks
Redis).

Redis replicates asynchronously: a primary that fails over to its replica can lose the
writes it acknowledged last. A unit that forwarded a batch on such a write (a group's new
destination, a lease) would then act on a table that no longer says so: the group's next
message could be placed elsewhere. With `min_replica_acks` = n > 0 the unit asks Redis to
WAIT until n replicas hold every write its connection made, once per batch, after the
batch's last table write and before its commit; fewer in time, or a connection made anew
since the batch's first write (its WAIT would vouch only for the writes after it), and the
batch is not forwarded: `NotReplicated`, a ConnectionError, handled as Redis being away.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from router.errors import RouterError


class NotReplicated(RouterError, redis.ConnectionError):
    """Fewer replicas than `redis.min_replica_acks` acknowledged a batch's table writes in
    time: nothing of the batch may be forwarded, as if Redis were away."""


@dataclass(frozen=True)
class AckRule:
    required: int  # redis.min_replica_acks; 0: never wait
    timeout_ms: int  # redis.replica_ack_timeout_ms

    @property
    def waits(self) -> bool:
        """Whether a batch waits for replicas at all."""
        return self.required > 0

    def wait_args(self) -> tuple[int, int]:
        """The arguments of `WAIT numreplicas timeout` (a timeout of 0 would block)."""
        return self.required, max(1, self.timeout_ms)

    def shortfall(self, acked: int, reconnected: bool) -> str | None:
        """None if the batch may commit, given WAIT's answer (replicas that acknowledged)
        and whether the connection was made anew since its first write; else why not."""
        if not self.waits:
            return None
        if reconnected:
            return (
                "the Redis connection was made anew since the batch's first table write: "
                "its WAIT cannot vouch for the writes before"
            )
        if acked < self.required:
            return (
                f"{acked} of {self.required} required Redis replicas acknowledged the batch's "
                f"table writes within {self.timeout_ms} ms"
            )
        return None
