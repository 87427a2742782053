"""A Schema Registry (Confluent-compatible REST API) over plain HTTP: schemas by ID and by
subject, cached (`client`); registry-framed Avro for clients and Spark jobs (`serde`)."""
