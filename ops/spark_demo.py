"""Spark demo driver (`make spark-demo`): Spark sender -> router -> Spark receiver.

    .venv/bin/python -m ops.spark_demo --help

The logic lives in `ops.harness.spark_demo`; this is its command line.
"""

from __future__ import annotations

import sys

from ops.harness.spark_demo import main

if __name__ == "__main__":
    sys.exit(main())
