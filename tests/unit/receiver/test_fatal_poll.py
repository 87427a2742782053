"""A Receiver whose consumer fails fatally (static membership: another member took its
`group.instance.id`) while librdkafka serves a log line in the same call: confluent-kafka
masks the error as a SystemError (`router.backends.kafka.fatal`); the application gets
the KafkaException. A fake consumer: the masking itself is reproduced on the real broker
for a producer in tests/integration/unit/test_session.py."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from tests.fixtures.receivers import FeedConsumer, fake_receiver


class Masking(FeedConsumer):
    def poll(self, timeout: float) -> None:
        fenced = KafkaError(KafkaError.FENCED_INSTANCE_ID, "fenced", fatal=True)
        raise SystemError("<class 'logging.LogRecord'> returned a result") from KafkaException(
            fenced
        )


def test_a_fatal_error_masked_as_a_system_error_reaches_the_application_as_itself() -> None:
    r = fake_receiver([])
    r._consumer = Masking([])
    for call in (lambda: r.poll(0.1), lambda: r.consume(10, 0.1)):
        with pytest.raises(KafkaException) as raised:
            call()
        assert raised.value.args[0].code() == KafkaError.FENCED_INSTANCE_ID
