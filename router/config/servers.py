"""The settings of the servers the router talks to: Kafka and Redis, with their security
(SASL/TLS, ACL users, secret files). Part of `router.config`, which re-exports them."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from router.errors import ConfigError


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Credentials(_Section):
    """A server reached as a user with a password (or a file holding it), over TLS with
    these files: the fields and checks Redis and the Schema Registry share."""

    section: ClassVar[str]  # the settings section's name, for messages
    # The user (Redis: the ACL user, None: "default") and its password, or a file holding it.
    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    # TLS: the CA that signed the server's certificate (None: the system's), a client
    # certificate and key for mutual TLS, and whether to verify the server's certificate
    # and host name (only ever off for a throwaway test server).
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_verify: bool = True

    def _check_password(self) -> None:
        if self.password is not None and self.password_file is not None:
            n = self.section
            raise ConfigError(f"set {n}.password or {n}.password_file, not both")

    def _check_tls_pair(self) -> None:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            n = self.section
            raise ConfigError(f"{n}.tls_cert_file and {n}.tls_key_file go together")

    def secret(self) -> str | None:
        """The password, from the settings or read from its file now."""
        if self.password is not None:
            return self.password.get_secret_value()
        if self.password_file is not None:
            return read_secret(self.password_file, f"{self.section}.password")
        return None


# librdkafka properties that hold a secret: never in `client_config` (printed, and often
# passed on command lines), always in the SecretStr fields or a secret file.
SECRET_CLIENT_KEYS = frozenset(
    {
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "sasl.oauthbearer.client.secret",
        "sasl.jaas.config",
    }
)


def read_secret(path: Path, what: str) -> str:
    """A secret from a file (its first line; a mounted secret, a file of mode 600), read
    when a client is built, never at import time."""
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} file {path}: {exc.strerror}") from exc
    lines = text.splitlines()
    if not lines or not lines[0]:
        raise ConfigError(f"the {what} file {path} is empty")
    return lines[0]


def sentinel_address(address: str, setting: str = "redis.sentinels") -> tuple[str, int]:
    """ "host:port" (or "[v6 address]:port") -> (host, port), or a ConfigError saying why
    (naming `setting`: redis.sentinels, redis.cluster_nodes)."""
    host, colon, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{setting}: {address!r} is not host:port")
    return host, int(port)


class KafkaSettings(_Section):
    bootstrap_servers: str = "127.0.0.1:9092"
    # Extra librdkafka properties for every client (security.protocol, ssl.ca.location,
    # sasl.mechanism, sasl.username, ...). Secrets go in the SecretStr fields below, or in
    # a file named by sasl_password_file (README: "Production deployment").
    client_config: dict[str, str] = Field(default_factory=dict)
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = None
    ssl_key_password: SecretStr | None = None
    # Consumer group protocol of the units: "consumer" (KIP-848) or "classic".
    group_protocol: Literal["consumer", "classic"] = "consumer"
    # A killed unit's open transaction blocks read_committed readers of its partitions
    # until the broker aborts it, so keep this short.
    transaction_timeout_ms: int = Field(10_000, ge=1_000)
    linger_ms: int = Field(5, ge=0)
    compression_type: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "lz4"
    # Topic creation ("router topics create"). Unset: from the cluster (router/topology/topics.py
    # `replication`): three copies once it has three brokers, with min.insync.replicas=2,
    # so that acks=all means "held by two brokers"; one on a single broker.
    replication_factor: int | None = Field(None, ge=1)
    min_insync_replicas: int | None = Field(None, ge=1)
    max_message_bytes: int = Field(1_048_576, ge=1024)
    # A producer (the Sender's, a unit's transactional one) whose librdkafka statistics name
    # no broker for this long is replaced, and a unit whose consumer is so exits (code 2):
    # librdkafka#5301 leaves a client that lost its only broker so for good
    # (router/backends/kafka/brokerwatch.py). 0: never.
    no_broker_replace_s: float = Field(30.0, ge=0)

    @field_validator("client_config")
    @classmethod
    def _no_secrets_in_client_config(cls, value: dict[str, str]) -> dict[str, str]:
        secret = sorted(SECRET_CLIENT_KEYS & set(value))
        if secret:
            raise ConfigError(
                f"client_config may not hold secrets ({', '.join(secret)}): use "
                "kafka.sasl_password (ROUTER_KAFKA__SASL_PASSWORD), kafka.sasl_password_file "
                "or kafka.ssl_key_password"
            )
        return value

    @model_validator(mode="after")
    def _one_password_source(self) -> KafkaSettings:
        if self.sasl_password is not None and self.sasl_password_file is not None:
            raise ConfigError("set kafka.sasl_password or kafka.sasl_password_file, not both")
        rf, isr = self.replication_factor, self.min_insync_replicas
        if rf is not None and isr is not None and isr > rf:
            raise ConfigError(
                f"kafka.min_insync_replicas ({isr}) above kafka.replication_factor ({rf}): "
                "no acks=all write could ever succeed"
            )
        return self

    def common(self) -> dict[str, str | int]:
        """librdkafka properties shared by every client, secrets included."""
        config: dict[str, str | int] = {"bootstrap.servers": self.bootstrap_servers}
        config.update(self.client_config)
        if self.sasl_password is not None:
            config["sasl.password"] = self.sasl_password.get_secret_value()
        elif self.sasl_password_file is not None:
            config["sasl.password"] = read_secret(self.sasl_password_file, "kafka.sasl_password")
        if self.ssl_key_password is not None:
            config["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        return config


class RedisSettings(_Credentials):
    section = "redis"
    # redis:// or, for TLS, rediss://; credentials never in the URL (it is printed). The
    # user, password and TLS files (rediss:// only): `_Credentials`.
    url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "router"
    socket_timeout_s: float = Field(2.0, gt=0)
    # Sentinel (README: "Sentinel"): the primary is whichever the Sentinels at `sentinels`
    # ("host:port") name for `sentinel_service`, asked again after every failover; `url`
    # then only says TLS or not (rediss://) and the database number. The ACL user,
    # password and TLS settings above apply to the Sentinels and the data nodes alike.
    sentinels: tuple[str, ...] = ()
    sentinel_service: str | None = None
    # Sentinel behind NAT or port forwarding: "announced host:port" -> "reachable host:port".
    # A data node the Sentinels announce at a key (the primary, a replica) is connected to
    # at its value instead; others as announced. The Sentinels' own addresses are not mapped.
    address_map: dict[str, str] = Field(default_factory=dict)
    # Redis Cluster (README: "Redis Cluster"): "host:port" of some of its nodes (any role; the
    # client learns the rest and the slots from them, and again after a failover). Every
    # table's keys share one hash slot, so each script runs on the primary holding it; `url`
    # then only says TLS or not (rediss://), its database must be 0. Not with `sentinels`.
    cluster_nodes: tuple[str, ...] = ()
    # After a batch's table writes and before its transaction commits, a unit waits (WAIT)
    # until this many replicas hold them, at most `replica_ack_timeout_ms`; fewer in time:
    # the batch is not forwarded, as if Redis were away (router/unit/commit/replica_acks.py). 0: no
    # wait.
    min_replica_acks: int = Field(0, ge=0)
    replica_ack_timeout_ms: int = Field(1000, ge=1)

    @field_validator("url")
    @classmethod
    def _no_credentials_in_url(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError("redis.url must start with redis://, rediss:// (TLS) or unix://")
        netloc = value.split("://", 1)[1].split("/", 1)[0]
        if "@" in netloc:
            raise ConfigError(
                "redis.url may not hold credentials (it is printed and logged): use "
                "redis.username and redis.password (ROUTER_REDIS__PASSWORD) or redis.password_file"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> RedisSettings:
        self._check_password()
        tls = (self.tls_ca_file, self.tls_cert_file, self.tls_key_file)
        if any(tls) and not self.tls:
            raise ConfigError("redis.tls_* files need a rediss:// URL (TLS)")
        self._check_tls_pair()
        if bool(self.sentinels) != bool(self.sentinel_service):
            raise ConfigError("redis.sentinels and redis.sentinel_service go together")
        if self.sentinels and self.url.startswith("unix://"):
            raise ConfigError("redis.sentinels need a redis:// or rediss:// URL, not unix://")
        if self.cluster_nodes:
            self._check_cluster()
        if self.address_map and not self.sentinels:
            raise ConfigError(
                "redis.address_map maps the data nodes' addresses the Sentinels announce: "
                "it needs redis.sentinels (with redis.url, name the reachable address there)"
            )
        if self.replica_ack_timeout_ms >= self.socket_timeout_s * 1000:
            raise ConfigError(
                f"redis.replica_ack_timeout_ms ({self.replica_ack_timeout_ms}) must be below "
                f"redis.socket_timeout_s ({self.socket_timeout_s} s): the wait for replicas "
                "would end on the socket's timeout instead"
            )
        return self

    def _check_cluster(self) -> None:
        if self.address_map:
            raise ConfigError(
                "redis.address_map applies to Sentinel only: a Redis Cluster's slot map and "
                "redirects would bypass it (not with redis.cluster_nodes)"
            )
        if self.sentinels:
            raise ConfigError(
                "set redis.cluster_nodes (Redis Cluster) or redis.sentinels (Sentinel), not both"
            )
        if self.url.startswith("unix://"):
            raise ConfigError("redis.cluster_nodes need a redis:// or rediss:// URL, not unix://")
        path = self.url.split("://", 1)[1].partition("/")[2].strip("/")
        if path not in ("", "0"):
            raise ConfigError(
                f"redis.url {self.url!r}: a Redis Cluster has database 0 only (redis.cluster_nodes)"
            )

    @field_validator("sentinels")
    @classmethod
    def _host_ports(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for address in value:
            sentinel_address(address)
        return value

    @field_validator("cluster_nodes")
    @classmethod
    def _node_host_ports(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for address in value:
            sentinel_address(address, "redis.cluster_nodes")
        return value

    @field_validator("address_map")
    @classmethod
    def _mapped_host_ports(cls, value: dict[str, str]) -> dict[str, str]:
        seen: dict[tuple[str, int], str] = {}
        for announced, reachable in value.items():
            host, port = sentinel_address(announced, "redis.address_map")
            key = (host.lower(), port)
            sentinel_address(reachable, "redis.address_map")
            if key in seen:
                raise ConfigError(
                    f"redis.address_map: {seen[key]!r} and {announced!r} are the same address"
                )
            seen[key] = announced
        return value

    def sentinel_addresses(self) -> list[tuple[str, int]]:
        return [sentinel_address(a) for a in self.sentinels]

    def cluster_addresses(self) -> list[tuple[str, int]]:
        return [sentinel_address(a, "redis.cluster_nodes") for a in self.cluster_nodes]

    def where(self) -> str:
        """Where the table lives, for messages (never a secret)."""
        if self.cluster_nodes:
            return f"Redis Cluster at {','.join(self.cluster_nodes)}"
        if self.sentinels:
            return f"Sentinel service {self.sentinel_service!r} at {','.join(self.sentinels)}"
        return self.url

    @property
    def tls(self) -> bool:
        return self.url.startswith("rediss://")
