"""The settings of the Schema Registry the router may use (any registry that speaks the
Confluent-compatible REST API): where it is, its TLS and basic-auth credentials, and whether
the router's own events are written registry-framed. Part of `router.config`."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator, model_validator

from router.config.servers import _Section, read_secret
from router.errors import ConfigError


class RegistrySettings(_Section):
    # The registry's Confluent-compatible API, e.g. http://127.0.0.1:8081 (Confluent) or
    # http://127.0.0.1:8081/apis/ccompat/v7 (Apicurio, ops/registry.sh); https:// for TLS.
    # None: no registry (routing.subject_by_type and frame_events need one).
    url: str | None = None
    # Basic auth: the user and its password, or a file holding it (never in the URL).
    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    # TLS (https:// only): the CA that signed the registry's certificate (None: the system's),
    # a client certificate and key for mutual TLS, and whether to verify the certificate.
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_verify: bool = True
    # One HTTP call's time-out; a registry slower than this counts as away (the unit backs
    # off and retries the batch: a payload is never dead-lettered because of the registry).
    timeout_s: float = Field(5.0, gt=0)
    # Write the router's events (dead letters, expired messages, ...) registry-framed: each
    # event schema is registered at start under its full name (record name strategy, e.g.
    # router.events.DeadLetter) and every event carries the magic byte and its ID.
    frame_events: bool = False

    @field_validator("url")
    @classmethod
    def _http_without_credentials(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")):
            raise ConfigError("registry.url must start with http:// or https://")
        if "@" in value.split("://", 1)[1].split("/", 1)[0]:
            raise ConfigError(
                "registry.url may not hold credentials (it is printed and logged): use "
                "registry.username and registry.password (ROUTER_REGISTRY__PASSWORD) or "
                "registry.password_file"
            )
        return value.rstrip("/")

    @model_validator(mode="after")
    def _consistent(self) -> RegistrySettings:
        if self.password is not None and self.password_file is not None:
            raise ConfigError("set registry.password or registry.password_file, not both")
        if (self.password is not None or self.password_file is not None) and not self.username:
            raise ConfigError("registry.password needs registry.username (basic auth)")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("registry.tls_cert_file and registry.tls_key_file go together")
        if self.frame_events and self.url is None:
            raise ConfigError("registry.frame_events needs registry.url")
        return self

    def secret(self) -> str | None:
        """The password, from the settings or read from its file now."""
        if self.password is not None:
            return self.password.get_secret_value()
        if self.password_file is not None:
            return read_secret(self.password_file, "registry.password")
        return None
