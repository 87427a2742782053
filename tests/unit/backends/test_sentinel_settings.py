"""Redis through Sentinel and the wait for replicas, without servers: the settings'
validation, the one client builder's wiring (nothing connects until a command is sent),
and the WAIT-count decision (`router.unit.commit.replica_acks`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from pydantic import ValidationError
from redis.sentinel import SentinelConnectionPool

from router.backends.redis.client import connects, database, redis_client
from router.config import RedisSettings, load_settings
from router.security.redis import acl_rule
from router.unit.commit.replica_acks import AckRule, NotReplicated

SENTINELS = ("127.0.0.1:26391", "[::1]:26392", "sentinel-3.example:26393")


def test_sentinel_settings_are_off_by_default() -> None:
    r = RedisSettings()
    assert (r.sentinels, r.sentinel_service, r.min_replica_acks) == ((), None, 0)
    assert r.replica_ack_timeout_ms == 1000
    assert r.where() == "redis://127.0.0.1:6379/0"


def test_sentinels_are_host_port_pairs() -> None:
    r = RedisSettings(sentinels=SENTINELS, sentinel_service="router")
    assert r.sentinel_addresses() == [
        ("127.0.0.1", 26391),
        ("::1", 26392),
        ("sentinel-3.example", 26393),
    ]
    assert r.where() == f"Sentinel service 'router' at {','.join(SENTINELS)}"


@pytest.mark.parametrize(
    "bad", ["127.0.0.1", ":26379", "host:", "host:port", "host:0", "host:65536", "[]:1"]
)
def test_a_sentinel_that_is_not_host_port_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="is not host:port"):
        RedisSettings(sentinels=(bad,), sentinel_service="router")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sentinels": SENTINELS}, "go together"),
        ({"sentinel_service": "router"}, "go together"),
        (
            {"sentinels": SENTINELS, "sentinel_service": "r", "url": "unix:///tmp/r.sock"},
            "not unix://",
        ),
        ({"replica_ack_timeout_ms": 2000}, "below redis.socket_timeout_s"),
        ({"replica_ack_timeout_ms": 500, "socket_timeout_s": 0.5}, "below"),
        ({"replica_ack_timeout_ms": 0}, "greater than or equal to 1"),
        ({"min_replica_acks": -1}, "greater than or equal to 0"),
    ],
)
def test_inconsistent_settings_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RedisSettings(**fields)  # type: ignore[arg-type]


def test_the_environment_names_sentinels_as_a_json_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROUTER_CONFIG", raising=False)
    monkeypatch.setenv("ROUTER_REDIS__SENTINELS", '["127.0.0.1:26391","127.0.0.1:26392"]')
    monkeypatch.setenv("ROUTER_REDIS__SENTINEL_SERVICE", "orders")
    monkeypatch.setenv("ROUTER_REDIS__MIN_REPLICA_ACKS", "1")
    monkeypatch.setenv("ROUTER_REDIS__REPLICA_ACK_TIMEOUT_MS", "250")
    r = load_settings().redis
    assert r.sentinels == ("127.0.0.1:26391", "127.0.0.1:26392")
    assert (r.sentinel_service, r.min_replica_acks, r.replica_ack_timeout_ms) == ("orders", 1, 250)


def test_a_sentinel_client_asks_the_sentinels_with_the_same_credentials_and_tls(
    tmp_path: Path,
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read until a connection is made\n")
    secret = tmp_path / "redis.password"
    secret.write_text("s3cret\n")
    settings = RedisSettings(
        url="rediss://ignored:1/3",
        sentinels=SENTINELS[:1],
        sentinel_service="orders",
        username="router-unit",
        password_file=secret,
        tls_ca_file=ca,
    )
    client = redis_client(settings)  # connects to nothing yet
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "orders" and pool.is_master
    data = pool.connection_kwargs
    assert (data["username"], data["password"], data["db"]) == ("router-unit", "s3cret", 3)
    assert data["ssl_ca_certs"] == str(ca) and data["ssl_cert_reqs"] == "required"
    assert "SSL" in pool.connection_class.__name__
    assert data["retry"].get_retries() == 0  # fails fast: the units decide when to retry
    sentinel = pool.sentinel_manager.sentinels[0].connection_pool
    asked = sentinel.connection_kwargs
    assert (asked["host"], asked["port"]) == ("127.0.0.1", 26391)
    assert (asked["username"], asked["password"]) == ("router-unit", "s3cret")
    assert asked["ssl_ca_certs"] == str(ca) and "SSL" in sentinel.connection_class.__name__
    assert connects(client) == 0


def test_a_plain_client_counts_its_connections_too() -> None:
    client = redis_client(RedisSettings(url="redis://127.0.0.1:1/2"))
    assert connects(client) == 0
    assert client.connection_pool.connection_kwargs["db"] == 2


def test_database_numbers_come_from_the_url_path() -> None:
    assert database("redis://h:1") == 0
    assert database("redis://h:1/") == 0
    assert database("rediss://h:1/7") == 7
    with pytest.raises(ValueError, match="database number"):
        database("redis://h:1/x")


def test_the_router_acl_allows_wait() -> None:
    assert "+wait" in acl_rule(load_settings())


# ---------------------------------------------------------------- the WAIT-count decision


def test_no_wait_when_min_replica_acks_is_zero() -> None:
    rule = AckRule(0, 1000)
    assert not rule.waits
    assert rule.shortfall(0, reconnected=True) is None


def test_enough_replicas_let_the_batch_commit() -> None:
    rule = AckRule(2, 500)
    assert rule.waits and rule.wait_args() == (2, 500)
    assert rule.shortfall(2, reconnected=False) is None
    assert rule.shortfall(3, reconnected=False) is None


def test_too_few_replicas_in_time_hold_the_batch_back() -> None:
    reason = AckRule(2, 500).shortfall(1, reconnected=False)
    assert reason == (
        "1 of 2 required Redis replicas acknowledged the batch's table writes within 500 ms"
    )
    assert AckRule(1, 500).shortfall(0, reconnected=False) is not None


def test_a_connection_made_anew_since_the_first_write_is_not_trusted() -> None:
    """WAIT vouches for its own connection's writes only: made anew after the batch's
    first write, it would count replicas of later writes and pass writes that were lost."""
    reason = AckRule(1, 500).shortfall(1, reconnected=True)
    assert reason is not None and "made anew" in reason


def test_wait_never_blocks_for_ever() -> None:
    assert AckRule(1, 0).wait_args() == (1, 1)  # WAIT n 0 would block until acknowledged


def test_not_replicated_is_redis_away() -> None:
    """Units handle it as they handle an unreachable Redis (a ConnectionError)."""
    assert issubclass(NotReplicated, redis.ConnectionError)
