"""The settings of the Schema Registry the router may use (any registry that speaks the
Confluent-compatible REST API): where it is, its TLS and basic-auth credentials, and whether
the router's own events are written registry-framed. Part of `router.config`."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from router.config.servers import _Credentials
from router.errors import ConfigError


class RegistrySettings(_Credentials):
    section = "registry"
    # The registry's Confluent-compatible API, e.g. http://127.0.0.1:8081 (Confluent) or
    # http://127.0.0.1:8081/apis/ccompat/v7 (Apicurio, ops/registry.sh); https:// for TLS.
    # None: no registry (routing.subject_by_type and frame_events need one). Basic auth (a
    # user and its password, or a file holding it; never in the URL) and the TLS files
    # (https:// only): `_Credentials`.
    url: str | None = None
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
        self._check_password()
        if (self.password is not None or self.password_file is not None) and not self.username:
            raise ConfigError("registry.password needs registry.username (basic auth)")
        self._check_tls_pair()
        if self.frame_events and self.url is None:
            raise ConfigError("registry.frame_events needs registry.url")
        return self
