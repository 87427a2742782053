"""Spark Structured Streaming jobs that act as a sender and a receiver of the router.

`sender` turns business records into groups on the send queues, `receiver` checks and
reassembles what the receive queues deliver; both through Spark's own Kafka connector.
`session` builds the SparkSession, `domain` holds the demo domain shared by both jobs,
`groups` the per-group checks (pure Python), `streaming` the stop/restart discipline.
"""
