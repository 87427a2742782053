"""An order-guaranteeing routing layer on Kafka.

Messages that share a guarantee ID reach one receive queue, in the order sent, without
other messages interleaved while the group is open. See README.md and docs/.

The public entry points: `router.sender.Sender`, `router.receiver.Receiver`,
`router.config.RouterSettings`, `router.contract` (the headers), `router.multicast` (the
multicast headers, `router.contract.multicast`), `router.errors` (the exceptions,
re-exported here: `RouterError`, the base of every one the router raises on purpose, and
those a caller acts on: `InvalidRequest`, `ConfigError`, `ConfigNotFound`, `NotReady`,
`TimedOut`) and the `router` console script (`router.cli:main`).
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType

from router.errors import (
    ConfigError,
    ConfigNotFound,
    InvalidRequest,
    NotReady,
    RouterError,
    TimedOut,
)

try:
    __version__ = version("kafka-order-router")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

# Modules reachable from the top level under their old flat names (`from router import
# multicast`), imported when first asked for: `import router` stays light.
_ALIASES = {"multicast": "router.contract.multicast"}


def __getattr__(name: str) -> ModuleType:
    if name in _ALIASES:
        module = import_module(_ALIASES[name])
        globals()[name] = module
        return module
    raise AttributeError(f"module 'router' has no attribute {name!r}")


__all__ = [
    "ConfigError",
    "ConfigNotFound",
    "InvalidRequest",
    "NotReady",
    "RouterError",
    "TimedOut",
    "__version__",
]
