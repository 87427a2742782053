"""Prometheus metrics of every long-running role, scraped by a real Prometheus."""
