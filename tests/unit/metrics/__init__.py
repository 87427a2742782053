"""Pure tests of router.metrics: Prometheus series, health, and the Grafana dashboard's queries."""
