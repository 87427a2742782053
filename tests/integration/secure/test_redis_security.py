"""Redis security (issue 13, item 4): the router's table through a least-privilege ACL user
over TLS, and clear refusals for a missing password and for a user lacking the key
pattern. Short: these run in `make test` (the secured Redis starts in about a second)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from ops.harness.stack.securestack import SecureStack
from router.backends.redis.client import redis_client
from router.config import RouterSettings
from router.metrics.registry import Metrics, MetricsPublisher, metrics_key, read_all
from router.security.redis import RedisRefused, check_access
from router.table.routing import RouteRequest
from router.topology.side import table_for
from tests.fixtures.helpers import unique


def settings_for(
    stack: SecureStack, user: str | None, password_file: Path | None, **redis: object
) -> RouterSettings:
    """A fresh topology and key prefix on the secured Redis, as `user`."""
    return RouterSettings(
        redis=stack.redis_settings(user, password_file, key_prefix=unique("sec"), **redis),  # type: ignore[arg-type]
        topology={"name": unique("topo")},  # type: ignore[arg-type]
    )


def as_router_user(stack: SecureStack, s: RouterSettings) -> RouterSettings:
    """The same settings as a new ACL user with exactly `acl_rule(s)`."""
    user = unique("router")
    password = stack.router_redis_user(user, s)
    update = {"username": user, "password_file": password}
    return s.model_copy(update={"redis": s.redis.model_copy(update=update)})


def test_table_works_through_the_acl_user_over_tls(secure_redis: SecureStack) -> None:
    s = as_router_user(secure_redis, settings_for(secure_redis, None, None))
    client = redis_client(s.redis)
    assert client.connection_pool.connection_class.__name__ == "SSLConnection"
    check_access(client, s)
    table = table_for(s, "send", client)
    lane = "q/0"
    first = table.route(
        [RouteRequest("g1", False, 60_000, "", lane), RouteRequest(None, False, 60_000, "", lane)],
        batch="b1",
    )
    dest = first.decisions[0]
    entry = table.entry("g1")
    assert dest in table.destinations and entry is not None and entry.dest == dest
    table.settle("b1", [first.decisions[1]])
    final = table.route([RouteRequest("g1", True, 60_000, f"{lane}/7", lane)], batch="b2")
    assert final.decisions == [dest]
    table.settle("b2", [], [("g1", f"{lane}/7")])
    assert table.entry("g1") is None
    # The sweeper's calls: sweep, outbox, closing marks, the Redis clock.
    table.route([RouteRequest("g2", False, 1_000, "", lane)], batch="b3")
    swept = table.sweep(10, now_ms=table.now_ms() + 5_000)
    assert [x.guarantee_id for x in swept] == ["g2"]
    assert [x.guarantee_id for x in table.outbox(10)] == ["g2"]
    table.ack_outbox(1)
    assert table.closing_since(table.now_ms()) == []
    # Steering and the waiting room's reads.
    assert table.drain(dest) and table.draining() == {dest}
    assert table.undrain(dest)
    assert table.room() == {} and table.admitted() == {}
    # Metrics: published and read back by the same user.
    key = metrics_key(s.redis.key_prefix, s.topology.name, "send-unit", "me")
    m = Metrics()
    m.inc("consumed", 3)
    MetricsPublisher(m, client, key, 1_000).maybe_publish(force=True)
    assert read_all(client, s.redis.key_prefix, s.topology.name)["send-unit:me"]["consumed"] == 3
    client.close()


def test_the_router_user_may_do_nothing_else(secure_redis: SecureStack) -> None:
    s = as_router_user(secure_redis, settings_for(secure_redis, None, None))
    client = redis_client(s.redis)
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.get(f"{s.redis.key_prefix}:{{other:send}}:cursor")  # another topology's key
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.flushall()
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.execute_command("CONFIG", "GET", "dir")
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.eval("return 1", 0)  # only scripts by SHA: the router's own, loaded by it
    client.close()


def test_redis_without_the_password_is_refused(secure_redis: SecureStack) -> None:
    s = settings_for(secure_redis, None, None)
    with pytest.raises(RedisRefused, match="refused the credentials of user 'default'"):
        check_access(redis_client(s.redis), s)
    wrong = secure_redis.new_secret("redis-wrong")
    s = settings_for(secure_redis, "admin", wrong)
    with pytest.raises(RedisRefused, match="refused the credentials of user 'admin'"):
        check_access(redis_client(s.redis), s)


def test_a_user_lacking_the_key_pattern_is_refused(secure_redis: SecureStack) -> None:
    other = as_router_user(secure_redis, settings_for(secure_redis, None, None))
    # The same user for a topology its ACL does not name.
    s = settings_for(secure_redis, other.redis.username, other.redis.password_file)
    client = redis_client(s.redis)
    with pytest.raises(RedisRefused, match=r"lacks a permission.*router acls plan") as refused:
        check_access(client, s)
    assert f"{s.redis.key_prefix}:{{{s.topology.name}:send}}:*" in str(refused.value)
    with pytest.raises(redis.exceptions.NoPermissionError):
        table_for(s, "send", client).route([RouteRequest("g", False, 60_000, "", "q/0")])


def test_tls_is_verified(secure_redis: SecureStack) -> None:
    """Without the CA the server's certificate is not trusted; with a client certificate
    (mutual TLS) the same user works."""
    s = settings_for(secure_redis, "admin", secure_redis.secret_file("redis-admin"))
    untrusted = s.redis.model_copy(update={"tls_ca_file": None})
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        redis_client(untrusted).ping()
    cert, key = secure_redis.client_cert
    mutual = s.redis.model_copy(update={"tls_cert_file": cert, "tls_key_file": key})
    assert redis_client(mutual).ping()


def test_a_unit_refused_by_redis_exits_at_once_with_a_clear_error(
    secure_redis: SecureStack, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """No back-off loop on a refusal: the process says what is wrong and exits 2."""
    s = settings_for(secure_redis, None, None)
    config = tmp_path / "router.toml"
    config.write_text("")
    env = {
        "ROUTER_KAFKA__BOOTSTRAP_SERVERS": kafka_bootstrap,
        "ROUTER_REDIS__URL": s.redis.url,
        "ROUTER_REDIS__TLS_CA_FILE": str(secure_redis.ca_file),
        "ROUTER_REDIS__KEY_PREFIX": s.redis.key_prefix,
        "ROUTER_TOPOLOGY__NAME": s.topology.name,
        "PATH": "/usr/bin:/bin",
    }
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "router", "--config", str(config), "send-unit"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "refused the credentials of user 'default'" in done.stderr
    assert time.monotonic() - t0 < 30
