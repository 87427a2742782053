"""Pure tests of ops.harness.benchmark: the workload model and the reported figures."""
