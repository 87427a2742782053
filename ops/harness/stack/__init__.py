"""What a run runs on, started from Python: the servers (a local stack, a three-broker
cluster, a secured stack, a Sentinel set) and the router's own processes (a fleet of unit
processes, and a pipeline: a fresh topology with its units)."""
