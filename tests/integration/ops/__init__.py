"""The harness of ops/ on the real stack: the stack's servers, the benchmark driver, the short
chaos run, a run's leftovers."""
