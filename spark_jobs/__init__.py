"""Spark Structured Streaming jobs that act as a sender and a receiver of the router.

`api` is what a job of one's own uses, whatever its schema: `to_router_rows`,
`read_router_queues`, `complete_groups`. The demo jobs use it: `sender` turns business
records (read by `sources`) into groups on the send queues (`records`), `receiver`
checks and reassembles what the receive queues deliver, both through Spark's own Kafka
connector (`ops.spark_demo` runs them end to end through the router). Underneath:
`domain` (the demo domain both jobs share), `groups` (the per-group checks, pure Python)
and `group_state` (its adapter to Spark's state), `streaming` (stopping between
micro-batches, with `stopping`), `session` (the SparkSession and the shared options) and
`workload` (seeded business records).
"""
