"""Pure logic of spark_jobs that needs no Spark session (tests that need one: tests/spark)."""
