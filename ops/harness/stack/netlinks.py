"""Each unit's own links to Redis and to the broker, through Toxiproxy, so that ONE unit can be
cut off, slowed or have its connections reset while the others are not.

A *slot* ("send-unit.0", "receive-unit.1", ...) is a set of proxies: to Redis, and to
one of the broker's extra listeners (`LocalStack.unit_listeners`). The broker advertises
that listener at the proxy's own port, so a client bootstrapped through the proxy is sent
back to it for every broker connection (metadata, produce, fetch, group and transaction
coordinators): all of the unit's broker traffic goes through its slot. On the replicated
servers (`ops.harness.stack.hastack`) every broker has such a listener per unit, and the
slot has a proxy to each; a fault on "the broker" hits all three. There Redis is reached
through Sentinel, which hands every client the data node's own (announced) address: the
slot has a proxy to each data node (primary and replica) and to each Sentinel, and the
unit is started with `redis.sentinels` naming its Sentinel proxies and `redis.address_map`
mapping each data node's announced address to its proxy, so that its connection to
whichever node is primary, before or after a failover, goes through its slot. A fault on
"Redis" hits them all: a unit cut off from Redis can neither reach a data node nor ask a
Sentinel (as a unit on the far side of a partition). A unit process started by the
fleet takes the slot of its role with the fewest live processes (a replacement takes the
slot its killed predecessor left), `Fleet.placement`.

    links = UnitLinks(toxiproxy, stack, redis_url, {"send-unit": 2, "receive-unit": 3})
    pipeline.fleet.placement = links.place
    links.apply(fault); ...; links.heal(fault)   # ops.harness.stack.netplan.NetFault
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from ops.harness.stack.fleet import Proc
from ops.harness.stack.hastack import HaStack
from ops.harness.stack.localstack import LocalStack, free_port
from ops.harness.stack.netplan import SLOW_JITTER_MS, SLOW_LATENCY_MS, NetFault, Server
from ops.harness.stack.toxiproxy import Stream, Toxiproxy

STREAMS: tuple[Stream, ...] = ("upstream", "downstream")


@dataclass(frozen=True)
class Link:
    slot: str
    role: str
    redis_port: int | None  # the proxy's, forwarding to Redis (None: Sentinel, below)
    kafka_port: int  # the proxy's = the advertised port of the slot's broker listener
    more_kafka: tuple[int, ...] = ()  # a cluster's other brokers: their proxies' ports
    # Redis with Sentinel: per data node, (its announced port, its proxy's port) on
    # 127.0.0.1; and the ports of the proxies to each Sentinel
    redis_nodes: tuple[tuple[int, int], ...] = ()
    sentinels: tuple[int, ...] = ()

    def proxy(self, server: Server) -> str:
        return f"{self.slot}.{server}"

    def proxies(self, server: Server) -> list[str]:
        """Every proxy of the link to `server` (one per broker of a cluster)."""
        if server == "redis":
            if self.redis_port is not None:
                return [self.proxy("redis")]
            nodes = [f"{self.slot}.redis{n}" for n in range(1, 1 + len(self.redis_nodes))]
            return nodes + [f"{self.slot}.sentinel{n}" for n in range(1, 1 + len(self.sentinels))]
        more = [f"{self.slot}.kafka{n}" for n in range(2, 2 + len(self.more_kafka))]
        return [self.proxy("kafka"), *more]

    def env(self, redis_url: str) -> dict[str, str]:
        """The unit's settings: its Redis and its bootstrap servers are its proxies."""
        ports = (self.kafka_port, *self.more_kafka)
        env = {"ROUTER_KAFKA__BOOTSTRAP_SERVERS": ",".join(f"127.0.0.1:{p}" for p in ports)}
        if self.redis_port is not None:
            parts = urlsplit(redis_url)
            user, at, _ = parts.netloc.rpartition("@")
            where = f"{user}{at}127.0.0.1:{self.redis_port}"
            env["ROUTER_REDIS__URL"] = urlunsplit(parts._replace(netloc=where))
        if self.sentinels:
            env["ROUTER_REDIS__SENTINELS"] = json.dumps([f"127.0.0.1:{p}" for p in self.sentinels])
        if self.redis_nodes:
            env["ROUTER_REDIS__ADDRESS_MAP"] = json.dumps(
                {f"127.0.0.1:{node}": f"127.0.0.1:{proxy}" for node, proxy in self.redis_nodes}
            )
        return env


def choose_slot(role: str, links: Sequence[Link], procs: Sequence[Proc]) -> Link:
    """The link of `role` with the fewest live processes on it (the first such)."""
    mine = [link for link in links if link.role == role]
    if not mine:
        raise ValueError(f"no unit link for {role}")
    live = [p.slot for p in procs if p.alive and p.slot is not None]
    return min(mine, key=lambda link: live.count(link.slot))


class UnitLinks:
    def __init__(
        self,
        toxiproxy: Toxiproxy,
        stack: LocalStack | HaStack,
        redis_url: str,
        counts: Mapping[str, int],
    ) -> None:
        """On the replicated servers (`HaStack`) each unit's listener on every broker gets
        a proxy, and each data node and Sentinel one (see above)."""
        wanted = sum(counts.values())
        if len(stack.unit_listeners) < wanted:
            raise ValueError(
                f"{wanted} unit links need as many broker listeners; the stack has "
                f"{len(stack.unit_listeners)} (LocalStack.private(..., unit_links={wanted}))"
            )
        self.toxiproxy = toxiproxy
        self.redis_url = redis_url
        self.links: list[Link] = []
        listeners = iter(unit_brokers(stack))
        for role, n in counts.items():
            for i in range(n):
                brokers = next(listeners)
                redis_port = None if stack.redis_port is None else free_port()
                nodes, sentinels = redis_upstreams(stack)
                link = Link(
                    f"{role}.{i}",
                    role,
                    redis_port,
                    brokers[0][1],
                    tuple(advertised for _, advertised in brokers[1:]),
                    tuple((node, free_port()) for node in nodes),
                    tuple(free_port() for _ in sentinels),
                )
                listens = [redis_port] if redis_port is not None else []
                listens += [proxy for _, proxy in link.redis_nodes] + list(link.sentinels)
                upstreams = [stack.redis_port] if stack.redis_port is not None else []
                upstreams += [*nodes, *sentinels]
                for name, listen, upstream in zip(
                    link.proxies("redis"), listens, upstreams, strict=True
                ):
                    toxiproxy.proxy(name, f"127.0.0.1:{listen}", f"127.0.0.1:{upstream}")
                for name, (port, advertised) in zip(link.proxies("kafka"), brokers, strict=True):
                    toxiproxy.proxy(name, f"127.0.0.1:{advertised}", f"127.0.0.1:{port}")
                self.links.append(link)
        self.by_slot = {link.slot: link for link in self.links}

    @property
    def slots(self) -> list[str]:
        return [link.slot for link in self.links]

    def place(self, role: str, procs: Sequence[Proc]) -> tuple[str | None, dict[str, str]]:
        """`Fleet.placement`: units get a slot; other roles (the sweeper) connect directly."""
        if not any(link.role == role for link in self.links):
            return None, {}
        link = choose_slot(role, self.links, procs)
        return link.slot, link.env(self.redis_url)

    def apply(self, fault: NetFault) -> None:
        proxies = self.by_slot[fault.slot].proxies(fault.server)
        if not proxies:
            raise ValueError(f"{fault.slot} has no link to {fault.server}")
        for proxy in proxies:
            self._apply(proxy, fault.effect)

    def _apply(self, proxy: str, effect: str) -> None:
        if effect == "cut":
            # Nothing through, either way; the connections stay open (a silent partition:
            # the client's own time-outs notice), and are closed when the toxic is removed.
            for stream in STREAMS:
                self.toxiproxy.add_toxic(proxy, f"cut-{stream}", "timeout", {"timeout": 0}, stream)
        elif effect == "slow":
            attributes = {"latency": SLOW_LATENCY_MS, "jitter": SLOW_JITTER_MS}
            self.toxiproxy.add_toxic(proxy, "slow", "latency", attributes, "downstream")
        else:  # reset: the next byte either way resets the connection (RST)
            for stream in STREAMS:
                self.toxiproxy.add_toxic(
                    proxy, f"reset-{stream}", "reset_peer", {"timeout": 0}, stream
                )

    def heal(self, fault: NetFault) -> None:
        for proxy in self.by_slot[fault.slot].proxies(fault.server):
            for name in self.toxiproxy.toxics(proxy):
                self.toxiproxy.remove_toxic(proxy, name)

    def occupants(self, slot: str, procs: Sequence[Proc]) -> list[str]:
        return [p.name for p in procs if p.alive and p.slot == slot]


def unit_brokers(stack: LocalStack | HaStack) -> list[tuple[tuple[int, int], ...]]:
    """Per unit, its listener on each broker: (port, advertised port) pairs."""
    if isinstance(stack, HaStack):
        return list(stack.unit_listeners)
    return [(pair,) for pair in stack.unit_listeners]


def redis_upstreams(stack: LocalStack | HaStack) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """With Sentinel: the data nodes' ports and the Sentinels' (none on one Redis)."""
    if isinstance(stack, HaStack):
        return stack.node_ports, stack.sentinel_ports
    return (), ()
