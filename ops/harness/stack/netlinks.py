"""Each unit's own links to Redis and to the broker, through Toxiproxy, so that ONE unit can be
cut off, slowed or have its connections reset while the others are not.

A *slot* ("send-unit.0", "receive-unit.1", ...) is a pair of proxies: one to Redis, one to
one of the broker's extra listeners (`LocalStack.unit_listeners`). The broker advertises
that listener at the proxy's own port, so a client bootstrapped through the proxy is sent
back to it for every broker connection (metadata, produce, fetch, group and transaction
coordinators): all of the unit's broker traffic goes through its slot. A unit process
started by the fleet takes the slot of its role with the fewest live processes (a
replacement takes the slot its killed predecessor left), `Fleet.placement`.

    links = UnitLinks(toxiproxy, stack, redis_url, {"send-unit": 2, "receive-unit": 3})
    pipeline.fleet.placement = links.place
    links.apply(fault); ...; links.heal(fault)   # ops.harness.stack.netplan.NetFault
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from ops.harness.stack.fleet import Proc
from ops.harness.stack.localstack import LocalStack, free_port
from ops.harness.stack.netplan import SLOW_JITTER_MS, SLOW_LATENCY_MS, NetFault, Server
from ops.harness.stack.toxiproxy import Stream, Toxiproxy

STREAMS: tuple[Stream, ...] = ("upstream", "downstream")


@dataclass(frozen=True)
class Link:
    slot: str
    role: str
    redis_port: int  # the proxy's, forwarding to Redis
    kafka_port: int  # the proxy's = the advertised port of the slot's broker listener

    def proxy(self, server: Server) -> str:
        return f"{self.slot}.{server}"

    def env(self, redis_url: str) -> dict[str, str]:
        """The unit's settings: its Redis and its bootstrap server are its proxies."""
        parts = urlsplit(redis_url)
        netloc = parts.netloc.rpartition("@")
        auth = netloc[0] + netloc[1]
        url = urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{self.redis_port}"))
        return {
            "ROUTER_REDIS__URL": url,
            "ROUTER_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{self.kafka_port}",
        }


def choose_slot(role: str, links: Sequence[Link], procs: Sequence[Proc]) -> Link:
    """The link of `role` with the fewest live processes on it (the first such)."""
    mine = [link for link in links if link.role == role]
    if not mine:
        raise ValueError(f"no unit link for {role}")
    live = [p.slot for p in procs if p.alive and p.slot is not None]
    return min(mine, key=lambda link: live.count(link.slot))


class UnitLinks:
    def __init__(
        self, toxiproxy: Toxiproxy, stack: LocalStack, redis_url: str, counts: Mapping[str, int]
    ) -> None:
        wanted = sum(counts.values())
        if len(stack.unit_listeners) < wanted:
            raise ValueError(
                f"{wanted} unit links need as many broker listeners; the stack has "
                f"{len(stack.unit_listeners)} (LocalStack.private(..., unit_links={wanted}))"
            )
        self.toxiproxy = toxiproxy
        self.redis_url = redis_url
        self.links: list[Link] = []
        listeners = iter(stack.unit_listeners)
        for role, n in counts.items():
            for i in range(n):
                broker_port, advertised = next(listeners)
                link = Link(f"{role}.{i}", role, free_port(), advertised)
                toxiproxy.proxy(
                    link.proxy("redis"),
                    f"127.0.0.1:{link.redis_port}",
                    f"127.0.0.1:{stack.redis_port}",
                )
                toxiproxy.proxy(
                    link.proxy("kafka"), f"127.0.0.1:{advertised}", f"127.0.0.1:{broker_port}"
                )
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
        proxy = self.by_slot[fault.slot].proxy(fault.server)
        if fault.effect == "cut":
            # Nothing through, either way; the connections stay open (a silent partition:
            # the client's own time-outs notice), and are closed when the toxic is removed.
            for stream in STREAMS:
                self.toxiproxy.add_toxic(proxy, f"cut-{stream}", "timeout", {"timeout": 0}, stream)
        elif fault.effect == "slow":
            attributes = {"latency": SLOW_LATENCY_MS, "jitter": SLOW_JITTER_MS}
            self.toxiproxy.add_toxic(proxy, "slow", "latency", attributes, "downstream")
        else:  # reset: the next byte either way resets the connection (RST)
            for stream in STREAMS:
                self.toxiproxy.add_toxic(
                    proxy, f"reset-{stream}", "reset_peer", {"timeout": 0}, stream
                )

    def heal(self, fault: NetFault) -> None:
        proxy = self.by_slot[fault.slot].proxy(fault.server)
        for name in self.toxiproxy.toxics(proxy):
            self.toxiproxy.remove_toxic(proxy, name)

    def occupants(self, slot: str, procs: Sequence[Proc]) -> list[str]:
        return [p.name for p in procs if p.alive and p.slot == slot]
