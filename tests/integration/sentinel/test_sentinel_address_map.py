"""`redis.address_map` on a real Sentinel set: a client whose map sends both data nodes'
announced addresses to Toxiproxy proxies of its own reaches the primary through them, and,
after the primary is SIGKILLed and the Sentinels promote its replica, the new primary
through that node's proxy: cutting the proxy (nothing through) cuts the client off from
the primary, healing it lets the client on (what `make chaos ARGS=--ha` relies on to cut
one unit off from Redis). ~15 s, most of it the failover and the old primary's return."""

from __future__ import annotations

import pytest
import redis

from ops.harness.stack.localstack import free_port
from ops.harness.stack.sentinelset import SentinelSet
from ops.harness.stack.toxiproxy import Toxiproxy
from router.backends.redis.client import redis_client
from tests.fixtures.helpers import unique, wait_until

pytestmark = pytest.mark.slow

AWAY = (redis.ConnectionError, redis.TimeoutError)


def cut(tp: Toxiproxy, proxy: str) -> None:
    for stream in ("upstream", "downstream"):
        tp.add_toxic(proxy, f"cut-{stream}", "timeout", {"timeout": 0}, stream)


def heal(tp: Toxiproxy, proxy: str) -> None:
    for name in tp.toxics(proxy):
        tp.remove_toxic(proxy, name)


def test_a_sentinel_client_reaches_each_primary_at_its_mapped_address(
    whole_set: SentinelSet, toxiproxy: Toxiproxy
) -> None:
    s, tp = whole_set, toxiproxy
    mapped: dict[str, str] = {}
    for node, port in enumerate(s.node_ports, start=1):
        listen = f"127.0.0.1:{free_port()}"
        tp.proxy(f"node{node}", listen, f"127.0.0.1:{port}")
        mapped[f"127.0.0.1:{port}"] = listen
    settings = s.redis_settings(
        key_prefix="router-test",
        socket_timeout_s=1.0,
        replica_ack_timeout_ms=500,
        address_map=mapped,
    )
    key = unique("address-map")
    client = redis_client(settings)
    try:
        first = s.primary()
        assert first is not None
        assert client.set(key, "before") is True
        cut(tp, f"node{first}")
        client.connection_pool.disconnect()
        with pytest.raises(AWAY):
            client.get(key)  # the primary answers, but not through the cut proxy
        assert s.node_client(first).get(key) == b"before"
        heal(tp, f"node{first}")
        client.connection_pool.disconnect()
        assert client.get(key) == b"before"

        s.kill_primary()
        second = s.wait_failover(first)
        client.connection_pool.disconnect()  # its connection to the dead node, gone
        cut(tp, f"node{second}")
        with pytest.raises(AWAY):
            client.set(key, "after")  # the new primary, through its own proxy: cut
        heal(tp, f"node{second}")
        client.connection_pool.disconnect()

        def written() -> bool:  # right after a failover the Sentinels may name no primary
            try:
                return client.set(key, "after") is True
            except (*AWAY, redis.sentinel.MasterNotFoundError):
                return False

        wait_until(written, 30, "the new primary, through its healed proxy")
        assert s.node_client(second).get(key) == b"after"
    finally:
        client.close()
        s.start(1)
        s.start(2)
        s.wait_whole()
        primary = s.primary()
        if primary is not None:
            s.node_client(primary).delete(key)
