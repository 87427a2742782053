"""The topology's settings: its name, and the queues and partitions each side reads and
writes (`router.config.settings.RouterSettings.topology`; the topics themselves:
`router topics create`)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from router.config.servers import _Section
from router.errors import ConfigError

_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class TopologySettings(_Section):
    """Which topics are send queues, transfer units and receive queues.

    Empty lists and names are derived from `name`: `<name>.send.<i>`, `<name>.transfer`,
    `<name>.recv.<i>`, `<name>.events`, `<name>.dlq`.
    """

    name: str = "router"
    send_queues: list[str] = Field(default_factory=list)
    send_queue_count: int = Field(2, ge=1)
    send_queue_partitions: int = Field(3, ge=1)
    # Each receive-side transfer unit is one partition of the transfer topic.
    receive_units: int = Field(3, ge=1)
    receive_queues: list[str] = Field(default_factory=list)
    receive_queue_count: int = Field(3, ge=1)
    transfer_topic: str = ""
    events_topic: str = ""
    dead_letter_topic: str = ""
    # Cells (docs/explanation/cells.md, `router.topology.cells`): the topology split into this
    # many cells, each with a table per side on a hash slot of its own; 1: one table per side,
    # today's keys. Every cell needs a send-queue partition, a transfer partition, a receive
    # queue and a room partition per side (`check_cells`).
    cells: int = Field(1, ge=1, le=64)

    @field_validator("name")
    @classmethod
    def _name_is_topic_safe(cls, value: str) -> str:
        if not _TOPIC.match(value):
            raise ConfigError("topology name may only use letters, digits, '.', '_' and '-'")
        return value

    @model_validator(mode="after")
    def _derive_names(self) -> TopologySettings:
        derived: dict[str, Any] = {}
        if not self.send_queues:
            derived["send_queues"] = [
                f"{self.name}.send.{i}" for i in range(1, self.send_queue_count + 1)
            ]
        if not self.receive_queues:
            derived["receive_queues"] = [
                f"{self.name}.recv.{i}" for i in range(1, self.receive_queue_count + 1)
            ]
        for field, suffix in (
            ("transfer_topic", "transfer"),
            ("events_topic", "events"),
            ("dead_letter_topic", "dlq"),
        ):
            if not getattr(self, field):
                derived[field] = f"{self.name}.{suffix}"
        for key, value in derived.items():
            object.__setattr__(self, key, value)
        names = [
            *self.send_queues,
            *self.receive_queues,
            self.transfer_topic,
            self.events_topic,
            self.dead_letter_topic,
        ]
        bad = [n for n in names if not _TOPIC.match(n)]
        if bad:
            raise ConfigError(f"invalid Kafka topic names: {bad}")
        if len(set(names)) != len(names):
            raise ConfigError("send queues, receive queues and router topics must all differ")
        return self

    def room_topic(self, side: str) -> str:
        """The waiting room of one side (`router.table.room`): parked messages of waiting groups."""
        return f"{self.name}.room.{side}"

    @property
    def send_group(self) -> str:
        """Consumer group of the send-side units (over the send queues)."""
        return f"{self.name}.send-units"

    @property
    def receive_group(self) -> str:
        """Consumer group of the receive-side units (over the transfer topic)."""
        return f"{self.name}.receive-units"


def check_cells(topology: TopologySettings, room_partitions: int, gap_policy: str) -> None:
    """ConfigError unless every cell owns at least one partition or queue of each kind: cell
    `c` owns the send-queue partitions, transfer partitions, receive queues and room partitions
    whose number (index) is `c` modulo the cell count. And not with gap policy "deliver": a
    gap in one cell may be a logical group's members sent to another cell's partitions, and
    delivering past it would split the group over two cells' destinations."""
    cells = topology.cells
    if cells == 1:
        return
    if gap_policy == "deliver":
        raise ConfigError(
            f'topology.cells = {cells} needs routing.gap_policy = "park": a sequence gap in '
            "one cell may be members sent to another cell's send-queue partitions, and "
            "delivering past it would split the group"
        )
    short = [
        f"{what} ({setting} = {have})"
        for what, setting, have in (
            ("send-queue partitions", "topology.send_queue_partitions",
             topology.send_queue_partitions),
            ("transfer partitions", "topology.receive_units", topology.receive_units),
            ("receive queues", "topology receive queues", len(topology.receive_queues)),
            ("room partitions", "routing.room_partitions", room_partitions),
        )
        if have < cells
    ]  # fmt: skip
    if short:
        raise ConfigError(
            f"topology.cells = {cells} needs at least {cells} of each kind, one per cell; "
            f"too few {', '.join(short)}"
        )
