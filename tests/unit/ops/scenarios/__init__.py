"""Pure tests of ops.harness.scenarios: the soak's growth check and its role slots."""
