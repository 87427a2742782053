"""Which partitions the consumer group's coordinator says this unit holds now: what a unit
asks before it claims partitions in its table (`router.unit.steps.ownership`).

A claim must stand for a current assignment. A unit frozen after its consumer received an
assignment and before its rebalance callback ran (or before a claim Redis refused was taken
again) resumes believing the partitions are its own while the group has long given them to
another member; its claim, reaching Redis last, would fence their real owner and let its own
stale batch through. The coordinator's view (DescribeConsumerGroups) says whether this member
still holds them: a zombie's member ID is gone from the group or holds other partitions."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from router.unit.steps.batch import TP

log = logging.getLogger("router.unit")

TIMEOUT_S = 2.0


class GroupView:
    def __init__(self, admin_config: dict[str, Any], group_id: str, consumer: Any) -> None:
        self.config = admin_config
        self.admin: AdminClient | None = None  # made on first use, again after a failure
        self.group_id = group_id
        self.consumer = consumer  # its memberid(): this unit in the group

    def held(self, tps: Iterable[TP]) -> set[TP] | None:
        """The partitions of `tps` the coordinator assigns to this member now; None if it
        cannot say now (the broker away, this consumer not a member yet)."""
        try:
            member = self.consumer.memberid()
        except (KafkaException, RuntimeError) as exc:
            log.info("not a group member yet: %s", exc)
            return None
        if not member:
            return None
        if self.admin is None:
            self.admin = AdminClient(self.config)
        try:
            future = self.admin.describe_consumer_groups(
                [self.group_id], request_timeout=TIMEOUT_S
            )[self.group_id]
            desc = future.result(timeout=TIMEOUT_S + 1)
        except Exception as exc:  # KafkaException, a time-out: the coordinator cannot say
            # Seen to time out again and again after a broker restart (a stale coordinator
            # connection?): the next question goes through a new client.
            self.admin = None
            log.warning("the group coordinator cannot say which partitions are ours: %s", exc)
            return None
        wanted = set(tps)
        for m in desc.members:
            if m.member_id == member:
                # Its current assignment, or the coordinator's target for it (the consumer
                # protocol updates the current one only once the member acknowledged it,
                # a heartbeat after its rebalance callback ran)
                mine = {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
                if m.target_assignment is not None:
                    mine |= {
                        (tp.topic, tp.partition) for tp in m.target_assignment.topic_partitions
                    }
                return wanted & mine
        return set()  # no longer a member: a zombie's view
