"""Whole runs of the system with a verdict: the demo (`make demo`), chaos (`make chaos`:
kills and server restarts under load), the burst of open groups, and the measurement of
the release lag the capacity rule allows for."""
