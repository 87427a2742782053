"""Pure tests of ops.harness.verdict: the verifier, the capacity rule, bands and QoS accounts."""
