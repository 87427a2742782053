"""Spark benchmark driver (`make spark-bench`): rate source -> Spark sender -> router ->
Spark receiver; sustained msg/s and group-completion latency.

    .venv/bin/python -m ops.spark_bench --help

The logic lives in `ops.harness.spark_bench`; this is its command line.
"""

from __future__ import annotations

import sys

from ops.harness.spark_bench import main

if __name__ == "__main__":
    sys.exit(main())
