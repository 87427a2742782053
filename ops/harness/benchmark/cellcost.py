"""The Redis Cluster stage's figures (ops/harness/benchmark/cluster.py): what routing costs
each primary of a three-primary cluster per message delivered, for a topology of one cell
and of three; the three-cell share of the busiest primary against the one-cell figure; the
ceilings that follow; and where a topology's tables land (the stage chooses names whose
tables fall where it wants them, as an operator would with CLUSTER KEYSLOT). Pure: no servers.

A node's cost is its CPU (INFO cpu: used_cpu_user + used_cpu_sys, every thread) over the run,
less what it burns idle (its cluster bus and cron, measured just before, scaled to the run's
length), divided by the messages delivered through both sides; beside it the time inside
scripts (INFO commandstats, EVALSHA & co.), which counts neither network I/O nor idling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from statistics import median

from redis.crc import key_slot

from router.table.store.codec import TableKeys
from router.topology.cells import tag

CELLS_GOAL = 0.4  # the 3-cell busiest primary's cost per message / the 1-cell one's (issue 30)
SIDES = ("send", "receive")
Ranges = list[tuple[int, int, int]]  # (first slot, last slot, its primary's port)
Placement = dict[str, int]  # "send 0", "receive 2" -> the port of the primary holding it


@dataclass(frozen=True)
class NodeCounters:
    cpu_s: float  # used_cpu_user + used_cpu_sys, every thread
    script_us: float  # INFO commandstats: µs inside EVALSHA & co.

    def __sub__(self, other: NodeCounters) -> NodeCounters:
        return NodeCounters(self.cpu_s - other.cpu_s, self.script_us - other.script_us)


@dataclass(frozen=True)
class ClusterRun:
    """One run of grouped traffic through both sides on the cluster."""

    label: str
    cells: int
    messages: int  # delivered through both sides (each routed once on each side)
    seconds: float  # between the counters read before and after
    used: dict[int, NodeCounters]  # primary's port -> its counters' growth over the run
    idle_cpu_s: dict[int, float]  # primary's port -> CPU seconds a second when idle
    placement: Placement = field(default_factory=dict)
    msg_s: float = 0.0  # the whole path's throughput (first commit to last)
    round: int = 0  # the stage runs every configuration once a round (`cluster.ROUNDS`)

    def cpu_us(self, port: int) -> float:
        """µs of the node's CPU per message delivered, its idling taken out."""
        if not self.messages:
            return 0.0
        busy = self.used[port].cpu_s - self.idle_cpu_s.get(port, 0.0) * self.seconds
        return max(0.0, busy) * 1e6 / self.messages

    def script_us(self, port: int) -> float:
        return self.used[port].script_us / self.messages if self.messages else 0.0

    @property
    def busiest(self) -> int:
        return max(self.used, key=self.cpu_us)

    @property
    def peak_us(self) -> float:
        return self.cpu_us(self.busiest) if self.used else 0.0

    @property
    def total_us(self) -> float:
        return sum(self.cpu_us(p) for p in self.used)

    @property
    def nodes_used(self) -> int:
        """The primaries that hold a table of the topology."""
        return len(set(self.placement.values())) or len(self.used)

    @property
    def ceiling(self) -> float:
        """Messages/s through both sides when the busiest primary's one thread is busy: the
        topology's ceiling on this cluster, whatever the fleet of units."""
        return 1e6 / self.peak_us if self.peak_us > 0 else 0.0


def slot_of(prefix: str, topology: str, cell: int, side: str) -> int:
    """The slot of a cell's table of `side` (every key of a table shares it)."""
    keys = TableKeys.of(prefix, tag(topology, cell), side)  # type: ignore[arg-type]
    return int(key_slot(keys.entries.encode()))


def placement(prefix: str, topology: str, cells: int, ranges: Ranges) -> Placement:
    out = {}
    for side in SIDES:
        for c in range(cells):
            slot = slot_of(prefix, topology, c, side)
            out[f"{side} {c}"] = next(port for a, b, port in ranges if a <= slot <= b)
    return out


def one_primary(p: Placement) -> bool:
    """Every table on one primary: one Redis doing the whole topology's routing."""
    return len(set(p.values())) == 1


def two_primaries(p: Placement) -> bool:
    """The two sides of a 1-cell topology on two primaries."""
    return len(p) == 2 and len(set(p.values())) == 2


def spread(p: Placement) -> bool:
    """Each side's cells on as many primaries as there are cells: each primary holds one
    send cell and one receive cell."""
    cells = len(p) // 2
    return all(len({p[f"{s} {c}"] for c in range(cells)}) == cells for s in SIDES)


def choose_name(
    names: Iterable[str], place: Callable[[str], Placement], want: Callable[[Placement], bool]
) -> tuple[str, Placement]:
    """The first of `names` whose tables are placed as `want` says."""
    for name in names:
        p = place(name)
        if want(p):
            return name, p
    raise RuntimeError("no name places the topology's tables as wanted")


def _where(p: Placement) -> str:
    return ", ".join(f"{k} :{port}" for k, port in p.items())


def lines(runs: list[ClusterRun]) -> Iterator[str]:
    """Per run its cost per primary and ceiling; then the 3-cell busiest primary against the
    1-cell one (all tables on one primary: one Redis doing it all), and against a 1-cell run
    with its two sides on two primaries if there was one: per round, side by side, and the
    median of the rounds' ratios (a single run's figure swings with the machine's load)."""
    rounds = len({r.round for r in runs})
    for r in runs:
        nodes = ", ".join(
            f":{p} {r.cpu_us(p):.2f} ({r.script_us(p):.2f} in scripts)" for p in sorted(r.used)
        )
        which = f"{r.label}, round {r.round + 1}" if rounds > 1 else r.label
        yield (
            f"Redis Cluster, {which} ({_where(r.placement)}): us of Redis CPU per message "
            f"through both sides, per primary: {nodes}; busiest :{r.busiest} {r.peak_us:.2f}, "
            f"all primaries {r.total_us:.2f}; ceiling {r.ceiling:,.0f} msg/s for the topology "
            f"({r.ceiling / r.nodes_used:,.0f} per primary holding its tables); path "
            f"{r.msg_s:,.0f} msg/s on this machine"
        )
    three = {r.round: r for r in runs if r.cells == 3}
    for label in dict.fromkeys(r.label for r in runs if r.cells == 1):
        pairs = [
            (three[r.round], r)
            for r in runs
            if r.label == label and r.round in three and r.peak_us and three[r.round].peak_us
        ]
        if not pairs:
            continue
        shares = [t.peak_us / o.peak_us for t, o in pairs]
        ceilings = [t.ceiling / o.ceiling for t, o in pairs]
        goal = f" (goal <= {CELLS_GOAL:g})" if one_primary(pairs[0][1].placement) else ""
        each = (
            f" (median of {len(pairs)} rounds: {', '.join(f'{x:.2f}' for x in shares)})"
            if len(pairs) > 1
            else ""
        )
        yield (
            f"Redis Cluster, 3 cells / {label}, busiest primary's CPU per message: "
            f"{median(shares):.2f}{goal}{each}; ceiling x{median(ceilings):.2f}"
        )
