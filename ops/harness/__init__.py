"""Drivers' building blocks: workload generation, verification, process fleets.

Shared by the demo, chaos and benchmark drivers in `ops/` and by the tests; not part of
the shipped package.
"""
