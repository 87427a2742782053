"""The servers' client adapters: Kafka (`kafka`: client configuration, blocking calls with a
deadline, committed and end offsets), Redis (`redis`: the one way a client is built) and a
Schema Registry (`registry`: its wire format, an HTTP client, a serde). They are independent
of each other."""
