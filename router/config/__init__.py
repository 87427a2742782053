"""Configuration: one frozen, typed settings object built once at the entry point
(`settings`), the servers' settings with their security (`servers`), the tracing settings
(`tracing`), and the client libraries' librdkafka dicts (`client`).

`RouterSettings` and the section models are re-exported here: `router.config.RouterSettings`.
"""

from router.config.settings import (
    SECRET_CLIENT_KEYS,
    KafkaSettings,
    MetricsSettings,
    PrioritySettings,
    RedisSettings,
    RegistrySettings,
    RouterSettings,
    RoutingSettings,
    SweeperSettings,
    TopologySettings,
    TracingSettings,
    UnitSettings,
    load_settings,
    read_secret,
)

__all__ = [
    "SECRET_CLIENT_KEYS",
    "KafkaSettings",
    "MetricsSettings",
    "PrioritySettings",
    "RedisSettings",
    "RegistrySettings",
    "RouterSettings",
    "RoutingSettings",
    "SweeperSettings",
    "TopologySettings",
    "TracingSettings",
    "UnitSettings",
    "load_settings",
    "read_secret",
]
