"""The broker away for several seconds under traffic (`tests.fixtures.outage`): units ride
it out by themselves, none dies or is replaced, and nothing is lost, duplicated, reordered
or split (judged from the destinations). After the broker's restart librdkafka's
send_offsets_to_transaction was seen to block past its own time-out
(confluentinc/librdkafka#5456, #5511) until the unit's commit deadline
(`router.unit.commit.timeouts.COMMIT_DEADLINE_S`, 45 s), so a run took 75-120 s. Since
2026-12-01 a commit stuck there is abandoned after 10 s
(`router.unit.commit.finishing.OffsetsWatch`): 41 s on 2026-12-02. It runs with `make
test-faults`; `make test` restarts the broker under traffic in the short chaos run."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.harness.stack.localstack import LocalStack
from router.config import RouterSettings
from tests.fixtures.outage import run_with_outage

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def test_units_ride_out_a_broker_outage(
    private_stack: LocalStack, private_settings: RouterSettings, tmp_path: Path
) -> None:
    run_with_outage(
        private_settings,
        tmp_path,
        private_stack.kafka_stop,
        private_stack.kafka_start,
        "",
    )
