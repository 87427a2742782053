"""Kafka: librdkafka client configuration (`clients`), blocking calls on a thread with a hard
deadline (`callthread`), a consumer group's committed offsets (`offsets`) and partitions'
end offsets (`endoffsets`)."""
