"""Pure tests of ops.harness.traffic: the workload plan."""
