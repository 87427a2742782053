"""An order-guaranteeing routing layer on Kafka.

Messages that share a guarantee ID reach one receive queue, in the order sent, without
other messages interleaved while the group is open. See README.md and docs/.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kafka-order-router")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
