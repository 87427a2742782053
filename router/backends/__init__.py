"""The servers' client adapters: Kafka (`kafka`: client configuration, blocking calls with a
deadline, committed and end offsets) and Redis (`redis`: the one way a client is built).
The two are independent of each other."""
