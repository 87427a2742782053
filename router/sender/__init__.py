"""The sender library: put messages on the send queues, a group on one partition, in order.

`Sender` (`client`) is built like a confluent-kafka `Producer`. Beside it: what a send
returns and its open groups (`groups`, pure), the producer and its acknowledgements
(`delivery`), the durable journal of open groups (`journal`), the send queues' backlog
(`backlog`) and the tail read of a restarted sender (`tailprobe`).
"""

from router.sender.client import DeliveryFailed, OpenGroupInfo, Sender, SenderFenced, SendReceipt

__all__ = ["DeliveryFailed", "OpenGroupInfo", "SendReceipt", "Sender", "SenderFenced"]
