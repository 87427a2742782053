"""Metrics of one process: the typed registry of counters, published to Redis once a second
(`registry`), the Prometheus series and health rules (`prom`), and the HTTP endpoint that
serves them (`exporter`)."""
