"""What the drain step's helpers (`router.unit.steps.drain.writes`,
`router.unit.steps.drain.logical`) read of the drain that calls them
(`router.unit.steps.drain.step.Drain`): its side, its emitter, its room index, the groups it
is opening, its consumer and its claims. A protocol, so that the helpers import neither the
step nor each other's caller."""

from __future__ import annotations

from typing import Protocol

from router.topology.side import SideSpec
from router.unit.steps.drain.index import RoomIndex
from router.unit.steps.emit.emitter import Emitter


class Draining(Protocol):
    @property
    def spec(self) -> SideSpec: ...
    @property
    def emitter(self) -> Emitter: ...
    @property
    def index(self) -> RoomIndex:
        """The index of the room partitions the unit owns (rebuilt on a reset)."""
        ...

    @property
    def opening(self) -> set[str]:
        """Groups drained here, not yet open or released."""
        ...

    @property
    def consumer(self) -> object:
        """The unit's source consumer: committed offsets and watermarks."""
        ...

    def claim_of(self, lane: str) -> str | None:
        """This unit's claim token on a room partition's lane (None: it holds no claim)."""
        ...
