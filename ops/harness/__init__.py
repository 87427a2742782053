"""Drivers' building blocks, grouped by what they do. Shared by the drivers in `ops/`
(demo, chaos, bench, spark_demo, spark_bench, segments_proof) and by the tests; not part
of the shipped package.

From the top down, each package importing only those below it:

* `spark`: the Spark demo and the Spark benchmark;
* `scenarios`: whole runs with a verdict (the demo, chaos, the burst of open groups, the
  release lag); `benchmark`: `make bench`'s stages, measurements and report;
* `traffic`: the workload, its senders, and reading back what the destinations hold;
  `stack`: the servers and the router's processes a run starts;
* `verdict`: what was sent against what the destinations hold (pure logic);
* `console` (what the drivers print) and `stats` (percentiles), shared by all of them.
"""
