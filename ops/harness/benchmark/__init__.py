"""The benchmark (`make bench`, `python -m ops.bench`): the stages and their plan, the
load and the measurements (throughput, latency, traces), the Java relay and the
three-broker row, the priority stage, and the report."""
