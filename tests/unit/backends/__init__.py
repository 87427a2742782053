"""Pure tests of router.backends (Kafka and Redis clients; no servers)."""
