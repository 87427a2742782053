"""`redis.address_map` without servers: the settings' validation, the pure mapping, and the
one client builder's wiring (nothing connects until a command is sent). That a Sentinel
client really connects to the mapped address, before and after a failover:
tests/integration/sentinel/test_sentinel_address_map.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from router.backends.redis.addressmap import AddressMap, MappedSentinel
from router.backends.redis.client import redis_client
from router.config import RedisSettings, load_settings

SENTINEL = {"sentinels": ("127.0.0.1:26391",), "sentinel_service": "router"}


def test_the_address_map_is_empty_by_default() -> None:
    assert RedisSettings().address_map == {}
    assert not AddressMap.parse({})


def test_an_announced_address_is_mapped_and_any_other_kept() -> None:
    remap = AddressMap.parse({"10.0.0.5:6379": "203.0.113.7:16379", "[fd00::5]:6379": "[::1]:7"})
    assert remap
    assert remap(("10.0.0.5", 6379)) == ("203.0.113.7", 16379)
    assert remap(("10.0.0.5", "6379")) == ("203.0.113.7", 16379)  # a port as text
    assert remap(("fd00::5", 6379)) == ("::1", 7)
    assert remap(("10.0.0.5", 6380)) == ("10.0.0.5", 6380)
    assert remap(("10.0.0.6", 6379)) == ("10.0.0.6", 6379)


def test_host_names_are_compared_in_lower_case() -> None:
    remap = AddressMap({("Redis-1.Example", 6379): ("127.0.0.1", 7001)})
    assert remap(("redis-1.example", 6379)) == ("127.0.0.1", 7001)
    assert remap(("REDIS-1.example", 6379)) == ("127.0.0.1", 7001)


def test_the_settings_take_a_mapping_with_sentinels() -> None:
    r = RedisSettings(**SENTINEL, address_map={"10.0.0.5:6379": "127.0.0.1:7001"})  # type: ignore[arg-type]
    assert r.address_map == {"10.0.0.5:6379": "127.0.0.1:7001"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"address_map": {"10.0.0.5:6379": "127.0.0.1:7001"}}, "needs redis.sentinels"),
        (
            {
                "address_map": {"10.0.0.5:6379": "127.0.0.1:7001"},
                "cluster_nodes": ("10.0.0.5:6379",),
            },
            "applies to Sentinel only",
        ),
        ({**SENTINEL, "address_map": {"10.0.0.5": "127.0.0.1:7001"}}, "'10.0.0.5' is not host"),
        ({**SENTINEL, "address_map": {"10.0.0.5:1": "127.0.0.1:0"}}, "'127.0.0.1:0' is not host"),
        (
            {**SENTINEL, "address_map": {"Node:1": "127.0.0.1:2", "node:1": "127.0.0.1:3"}},
            "are the same address",
        ),
    ],
)
def test_a_bad_address_map_is_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message) as caught:
        RedisSettings(**fields)  # type: ignore[arg-type]
    assert "redis.address_map" in str(caught.value)


def test_the_environment_gives_the_map_as_a_json_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROUTER_CONFIG", raising=False)
    monkeypatch.setenv("ROUTER_REDIS__SENTINELS", '["127.0.0.1:26391"]')
    monkeypatch.setenv("ROUTER_REDIS__SENTINEL_SERVICE", "orders")
    monkeypatch.setenv(
        "ROUTER_REDIS__ADDRESS_MAP", '{"10.0.0.5:6379":"127.0.0.1:7001","10.0.0.6:6379":"h:2"}'
    )
    r = load_settings().redis
    assert r.address_map == {"10.0.0.5:6379": "127.0.0.1:7001", "10.0.0.6:6379": "h:2"}


def test_a_sentinel_client_maps_what_the_sentinels_announce() -> None:
    settings = RedisSettings(**SENTINEL, address_map={"10.0.0.5:6379": "127.0.0.1:7001"})  # type: ignore[arg-type]
    pool = redis_client(settings).connection_pool  # connects to nothing yet
    manager = pool.sentinel_manager
    assert isinstance(manager, MappedSentinel)
    assert manager.remap(("10.0.0.5", 6379)) == ("127.0.0.1", 7001)
    # the Sentinels themselves are asked where the settings say
    asked = manager.sentinels[0].connection_pool.connection_kwargs
    assert (asked["host"], asked["port"]) == ("127.0.0.1", 26391)
