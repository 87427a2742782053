"""The harness refuses to run on topics an earlier run of the same name left behind: a run
killed before its cleanup left them full, and the next run's verdict, which reads its
topics from the beginning, would have judged the old records with its own (a chaos run
once reported thousands of duplicates that way)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from router.config import RouterSettings
from tests.fixtures.helpers import unique, wait_until


def test_a_pipeline_refuses_topics_left_by_a_run_of_the_same_name(
    base_settings: RouterSettings, admin: AdminClient, tmp_path: Path
) -> None:
    name = unique("left")
    spec = PipelineSpec(send_units=0, receive_units=0, sweepers=0)
    p = Pipeline(base_settings, spec, tmp_path / "a", name=name)
    leftover = p.settings.topology.receive_queues[0]
    assert leftover.startswith(f"{name}.")
    admin.create_topics([NewTopic(leftover, 1, 1)])[leftover].result(30)
    try:
        wait_until(lambda: leftover in admin.list_topics(timeout=10).topics, 30, "the topic")
        with pytest.raises(RuntimeError, match=f"its topics already exist \\({leftover}\\)"):
            p.start()
        assert (
            set(admin.list_topics(timeout=10).topics)
            & {
                p.settings.topology.transfer_topic,
                *p.settings.topology.send_queues,
            }
            == set()
        ), "nothing was created before the refusal"
    finally:
        p.cleanup()
    # A new name, and a topic passed in by name that exists on purpose, are not refused.
    fresh = Pipeline(
        base_settings,
        replace(spec, extra_env={"ROUTER_TOPOLOGY__TRANSFER_TOPIC": leftover}),
        tmp_path / "b",
        name=unique("fresh"),
    )
    admin.create_topics([NewTopic(leftover, 1, 1)])[leftover].result(30)
    try:
        wait_until(lambda: leftover in admin.list_topics(timeout=10).topics, 30, "the topic")
        assert fresh.settings.topology.transfer_topic == leftover
        fresh.refuse_leftovers()
    finally:
        fresh.cleanup()
