"""The Spark runs: the Spark demo (`make spark-demo`: Spark sender -> router -> Spark
receiver, with a verdict) and the Spark benchmark (`make spark-bench`: sustained msg/s and
group-completion latency)."""
