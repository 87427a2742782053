"""Pure tests of ops.harness.spark: `make spark-bench`'s figures."""
