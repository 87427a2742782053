"""`api.source_options`: every Kafka source option passes through (pure logic, no JVM)."""

from __future__ import annotations

import pytest

from spark_jobs.api import SOURCE_DEFAULTS, source_options


def test_every_option_passes_through_unchanged_and_wins_over_the_defaults() -> None:
    given = {
        "kafka.bootstrap.servers": "k1:9092,k2:9092",
        "kafka.security.protocol": "SSL",
        "groupIdPrefix": "orders-reader",
        "minPartitions": 8,
        "maxOffsetsPerTrigger": 10_000,
        "maxTriggerDelay": "30s",
        "minOffsetsPerTrigger": 500,
        "startingOffsets": "latest",
    }
    options = source_options(["q.1", "q.2"], given)
    assert options["subscribe"] == "q.1,q.2"
    for key, value in given.items():
        assert options[key] == str(value)
    for key, value in SOURCE_DEFAULTS.items():
        if key not in given:
            assert options[key] == value
    assert options["kafka.isolation.level"] == "read_committed"
    assert options["includeHeaders"] == "true"


def test_a_subscription_of_ones_own_replaces_the_queues() -> None:
    options = source_options([], {"subscribePattern": "orders\\.recv\\..*"})
    assert "subscribe" not in options
    assert options["subscribePattern"] == "orders\\.recv\\..*"


@pytest.mark.parametrize(
    ("queues", "options", "error"),
    [
        ([], {}, "no queues"),
        (["q"], {"assign": '{"q":[0]}'}, "choose one"),
        (["q"], {"includeHeaders": "false"}, "includeHeaders"),
    ],
)
def test_options_that_cannot_work_are_refused(
    queues: list[str], options: dict[str, str], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        source_options(queues, options)
