"""Drivers' building blocks: workload generation, verification, process fleets.

Shared by `router demo`, the chaos and benchmark drivers in `ops/`, and the tests.
"""
