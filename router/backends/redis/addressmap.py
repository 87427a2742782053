"""`redis.address_map`: the data nodes' addresses the Sentinels announce, mapped to the ones
this process can reach (NAT, port forwarding, a proxy of its own).

A Sentinel hands every client the address the data node announced (its own, as the
Sentinels see it). A process that reaches the nodes elsewhere names, per announced
"host:port", where to connect instead; `AddressMap` is that mapping (pure), and
`MappedSentinel` the redis-py `Sentinel` whose every answer (the primary, the replicas)
passes through it: each new connection of `Sentinel.master_for` asks it, so after a
failover the connection to the new primary goes to that primary's mapped address too.
An address not in the map is used as announced.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redis.sentinel import Sentinel

from router.config.servers import sentinel_address

Address = tuple[str, int]


class AddressMap:
    """announced (host, port) -> reachable (host, port); host names compared in lower case."""

    def __init__(self, pairs: Mapping[Address, Address]) -> None:
        self._pairs = {(host.lower(), port): to for (host, port), to in pairs.items()}

    @classmethod
    def parse(cls, mapping: Mapping[str, str]) -> AddressMap:
        """From `redis.address_map`'s "host:port" strings (validated with the settings)."""
        return cls(
            {
                sentinel_address(a, "redis.address_map"): sentinel_address(r, "redis.address_map")
                for a, r in mapping.items()
            }
        )

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def __call__(self, address: tuple[str, Any]) -> Address:
        """Where to connect for a node announced at `address` (its port as a Sentinel
        gives it: a number or its text)."""
        host, port = str(address[0]), int(address[1])
        return self._pairs.get((host.lower(), port), (host, port))


class MappedSentinel(Sentinel):  # redis-py leaves it untyped
    """A `Sentinel` whose data-node addresses pass through `remap` (the Sentinels' own
    connections are made to the addresses it was given)."""

    def __init__(self, sentinels: list[Address], remap: AddressMap, **kwargs: Any) -> None:
        super().__init__(sentinels, **kwargs)  # type: ignore[no-untyped-call]
        self.remap = remap

    def discover_master(self, service_name: str) -> Address:
        return self.remap(super().discover_master(service_name))  # type: ignore[no-untyped-call]

    def discover_slaves(self, service_name: str) -> list[Address]:
        found = super().discover_slaves(service_name)  # type: ignore[no-untyped-call]
        return [self.remap(a) for a in found]
