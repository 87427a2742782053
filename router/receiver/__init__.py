"""The receiver library: read the receive queues with `read_committed`, commit after
processing.

`Receiver` (`client`) is built like a confluent-kafka `Consumer`. Beside it: what it hands
the application (`received`, pure), reassembly of segments (`reassembly`), priority bands
(`bands`, `bandrestore`), expiry (`expiry_rules` pure, `expiry` the I/O), redelivery at
the head (`redelivery_rules` pure, `redelivery` the I/O, `deliverycounts`) and its own
dead letters and events (`letters`).
"""

from router.receiver.client import (
    ExpiryOptions,
    GroupStatus,
    Hook,
    OffsetTracker,
    Received,
    ReceivedGroup,
    Receiver,
    ReceiveTimeout,
    RedeliveryOptions,
    SegmentError,
)

__all__ = [
    "ExpiryOptions",
    "GroupStatus",
    "Hook",
    "OffsetTracker",
    "ReceiveTimeout",
    "Received",
    "ReceivedGroup",
    "Receiver",
    "RedeliveryOptions",
    "SegmentError",
]
