"""Security settings (issue 13): secrets never in printed fields or URLs, password files
read when a client is built, and the Redis ACL rule covering exactly what the router runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from router.config import KafkaSettings, RedisSettings, RouterSettings
from router.metrics.registry import metrics_key
from router.security.redis import CLIENT_COMMANDS, SCRIPT_COMMANDS, acl_rule, key_patterns
from router.table.store.codec import TableKeys
from tests.fixtures.paths import ROOT

ROUTER = ROOT / "router"


def test_every_command_the_lua_scripts_run_is_in_the_acl() -> None:
    used = {
        m.lower()
        for path in ROUTER.rglob("*.lua")
        for m in re.findall(r"redis\.p?call\(\s*['\"]([A-Za-z]+)['\"]", path.read_text())
    }
    assert used, "no redis.call found: the pattern is stale"
    assert used <= set(SCRIPT_COMMANDS), sorted(used - set(SCRIPT_COMMANDS))


def test_the_acl_rule_names_the_topology_keys_and_nothing_else() -> None:
    s = RouterSettings(redis={"key_prefix": "p"}, topology={"name": "t"})  # type: ignore[arg-type]
    rule = acl_rule(s)
    assert rule[:3] == ["resetkeys", "resetchannels", "-@all"]
    assert [r for r in rule if r.startswith("~")] == [
        "~p:{t:send}:*",
        "~p:{t:receive}:*",
        "~p:metrics:t:*",
    ]
    assert {r[1:] for r in rule if r.startswith("+")} == {*SCRIPT_COMMANDS, *CLIENT_COMMANDS}
    assert not any(c in rule for c in ("+eval", "+del", "+flushall", "+config", "+@all"))
    patterns = [re.compile(re.escape(p[:-1]) + ".*") for p in key_patterns(s)]
    keys = [*TableKeys.of("p", "t", "send").all(), *TableKeys.of("p", "t", "receive").all()]
    keys.append(metrics_key("p", "t", "send-unit", "host-1"))
    assert all(any(p.fullmatch(k) for p in patterns) for k in keys)


def test_glob_characters_in_a_prefix_are_escaped() -> None:
    s = RouterSettings(redis={"key_prefix": "a*b"}, topology={"name": "t"})  # type: ignore[arg-type]
    assert "~a\\*b:{t:send}:*" in acl_rule(s)


def test_redis_credentials_stay_out_of_the_url() -> None:
    with pytest.raises(ValidationError, match="may not hold credentials"):
        RedisSettings(url="rediss://router:s3cret@host:6380/0")
    with pytest.raises(ValidationError, match="not both"):
        RedisSettings(password="a", password_file=Path("/x"))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="need a rediss:// URL"):
        RedisSettings(url="redis://h:6379/0", tls_ca_file=Path("/ca.pem"))
    with pytest.raises(ValidationError, match="go together"):
        RedisSettings(url="rediss://h:6380/0", tls_cert_file=Path("/c.pem"))


def test_password_files_are_read_when_a_client_is_built(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    redis = RedisSettings(url="rediss://h:6380/0", username="router", password_file=secret)
    kafka = KafkaSettings(sasl_password_file=secret)
    secret.write_text("first\n")
    assert redis.secret() == "first" and kafka.common()["sasl.password"] == "first"
    secret.write_text("rotated\n")  # a rotated secret is picked up by the next client
    assert redis.secret() == "rotated" and kafka.common()["sasl.password"] == "rotated"
    assert "rotated" not in RouterSettings(redis=redis, kafka=kafka).model_dump_json()
    with pytest.raises(ValueError, match=r"cannot read the kafka\.sasl_password file"):
        KafkaSettings(sasl_password_file=tmp_path / "missing").common()
    secret.write_text("")
    with pytest.raises(ValueError, match="is empty"):
        redis.secret()


def test_kafka_secrets_may_not_hide_in_client_config() -> None:
    with pytest.raises(ValidationError, match=r"may not hold secrets \(sasl.password\)"):
        KafkaSettings(client_config={"sasl.password": "x", "sasl.username": "u"})
    with pytest.raises(ValidationError, match="not both"):
        KafkaSettings(sasl_password="a", sasl_password_file=Path("/x"))  # type: ignore[arg-type]


def test_secrets_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROUTER_REDIS__PASSWORD", "from-env")
    monkeypatch.setenv("ROUTER_KAFKA__SASL_PASSWORD", "kafka-env")
    s = RouterSettings()
    assert s.redis.secret() == "from-env" and s.kafka.common()["sasl.password"] == "kafka-env"
    assert "env" not in s.model_dump_json()
