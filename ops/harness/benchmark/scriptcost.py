"""The routing scripts' own cost on Redis, without Kafka: a driver that calls the send and
the receive side's tables (`router.table.store.management.ManagementTable`) as their units
do, batch after batch, and reads Redis's time inside each script call from `INFO
commandstats` (the `EVALSHA` microseconds around every call).

A unit's batch is one route call, then (after its commit) one settle call; the next batch
is routed before the last one settles (the overlapped commit: `carried` finals, `earlier`
batch). The send side routes messages from its source lanes to its destinations (transfer
partitions); the receive side routes what the send side sent, from each transfer
partition (its lanes) to the receive queues. Grouped messages carry their sequence number
(lane order: `q<n>`, a continuation past the first) as the bench's Sender does; each
unit claims its lanes, so every route call carries the lane fence.

Under `wait` the waiting room's drain is stood in for by its settle: each batch settles
the groups its side admitted since the last one, with the parks their entries hold (what
a drain that forwarded them passes), so that admitted groups open again; the drain's own
scripts (chained drains, the room's state) are not measured.

The load `kinds` measures each kind of message alone, both sides: batches of a group's
first messages, of its middle ones, of its finals, and of ordinary messages, each routed
and settled, beside 10,000 open groups (as many as the grouped load keeps open).

    .venv/bin/python -m ops.harness.benchmark.scriptcost              # on the stack's Redis
    .venv/bin/python -m ops.harness.benchmark.scriptcost --baseline main --rounds 5

`--baseline <git revision>` measures that revision's table (its `router/` package: its
scripts and the Python that calls them, so any argument format) beside this checkout's,
in alternating rounds on the same Redis with the same batches, each round in a process of
its own running this checkout's driver. The counters are server-wide: measure on a Redis
nothing else uses (`--redis-url`).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from statistics import median
from typing import Any

import redis

from ops.harness.benchmark.model import MEAN_GROUP_LENGTH
from ops.harness.benchmark.model import SCRIPT_GOAL_US as GOAL_US
from router.backends.redis.client import redis_client
from router.config.settings import RedisSettings
from router.table.routing import Policy, RouteRequest
from router.table.store.codec import TableKeys, decode_entry, script
from router.table.store.codec import text as _text
from router.table.store.management import ManagementTable

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ("route", "settle")
KINDS = ("first", "middle", "final", "ordinary")


@dataclass(frozen=True)
class ScriptLoad:
    """A load for the scripts: `grouped` of the messages belong to one of `open_groups`
    groups open at once (a new one as soon as one ends), group lengths `min_group` to
    `max_group`; `warmup` batches first, not measured (the table fills)."""

    name: str
    grouped: float
    open_groups: int
    min_group: int
    max_group: int
    policy: Policy
    batch_size: int = 500
    batches: int = 100
    warmup: int = 20
    source_lanes: int = 4  # send-queue partitions: the send side's lanes
    transfer: int = 12  # transfer partitions: the send side's destinations
    queues: int = 16  # receive queues: the receive side's destinations
    ttl_ms: int = 300_000
    seed: int = 7
    pace_ms: int = 0  # a pause between batches (0: back to back, as a saturated Redis runs)

    def label(self) -> str:
        paced = f", {self.pace_ms} ms between batches" if self.pace_ms else ""
        return (
            f"{self.grouped:.0%} grouped, {self.open_groups:,} open groups of "
            f"{self.min_group}-{self.max_group}"
            f", batches of {self.batch_size}, {self.policy}{paced}"
        )


# The bench's grouped traffic (`ops.harness.benchmark.model.GROUPED_ONLY`, under `share`:
# 10,000 groups open do not fit 12 destinations) and its unsaturated headline (under the
# waiting room), group lengths as the bench's (`MEAN_GROUP_LENGTH`).
LENGTHS = (MEAN_GROUP_LENGTH // 2, MEAN_GROUP_LENGTH * 3 // 2)
GROUPED = ScriptLoad("grouped", 1.0, 10_000, *LENGTHS, "share")
UNSATURATED = ScriptLoad("unsaturated", 0.5, 3, *LENGTHS, "wait")
# The grouped load at about one unit's pace in the bench's Kafka runs (a route call per side
# every 20-30 ms): the same calls cost Redis more when it idles between them (its caches go
# cold; the calls of a one-unit run, captured and replayed, cost 2.2 us per message back to
# back, 2.5 one ms apart, 2.75 five apart, 3.9 from 25 ms apart). A Redis near its ceiling
# runs its calls back to back: the loads above give the ceiling's cost, this one the reason
# a one-unit Kafka run reads more.
PACED = replace(GROUPED, name="paced", pace_ms=25)
LOADS = {load.name: load for load in (GROUPED, UNSATURATED, PACED)}


@dataclass
class Cost:
    """One side's script calls: Redis's main-thread CPU for them (µs: the command read,
    run and answered), the time inside them (µs, commandstats: wall time, which on a busy
    machine includes waiting for a core), calls and messages."""

    cpu: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SCRIPTS, 0.0))
    us: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SCRIPTS, 0.0))
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SCRIPTS, 0))
    messages: int = 0
    grouped: int = 0

    def add(self, name: str, cpu: float, us: float) -> None:
        self.cpu[name] += cpu
        self.us[name] += us
        self.calls[name] += 1

    def per_grouped(self, name: str | None = None, wall: bool = False) -> float:
        of = self.us if wall else self.cpu
        us = sum(of.values()) if name is None else of[name]
        return us / self.grouped if self.grouped else 0.0

    def per_message(self) -> float:
        return sum(self.cpu.values()) / self.messages if self.messages else 0.0


class Probe:
    """Redis's main-thread CPU and `EVALSHA`'s cumulative microseconds, read around each
    call (`INFO cpu commandstats`), less what reading them costs (calibrated)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.overhead = 0.0
        self.overhead = min(self.time(lambda: None)[1] for _ in range(20))

    def read(self) -> tuple[float, float]:
        info: dict[str, Any] = self.client.info("cpu", "commandstats")  # type: ignore[assignment]
        usec = sum(float(info[k]["usec"]) for k in ("cmdstat_evalsha", "cmdstat_eval") if k in info)
        cpu = float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])
        return cpu * 1e6, usec

    def time(self, call: Callable[[], Any]) -> tuple[Any, float, float]:
        """call's result, the CPU (µs) and script time (µs) it cost Redis."""
        cpu0, us0 = self.read()
        out = call()
        cpu1, us1 = self.read()
        return out, max(0.0, cpu1 - cpu0 - self.overhead), us1 - us0


def this_scripts() -> dict[str, str]:
    return {name: script(name) for name in SCRIPTS}


class Side:
    """One side's table, driven as its unit drives it."""

    def __init__(
        self,
        client: redis.Redis,
        probe: Probe,
        topology: str,
        side: str,
        dests: list[str],
        load: ScriptLoad,
        scripts: dict[str, str],
    ) -> None:
        keys = TableKeys.of("bench-scripts", topology, "send" if side == "send" else "receive")
        self.table = ManagementTable(client, keys, dests, load.policy)
        self.table.drop()
        self.table._route = client.register_script(scripts["route"])
        self.table._settle = client.register_script(scripts["settle"])
        self.probe = probe
        self.cost = Cost()
        self.dests = set(dests)
        self.side = side
        self.pending: tuple[str, set[str], list[tuple[str, str]]] | None = None
        self.drains: list[tuple[str, int]] = []

    def claim(self, lanes: list[str]) -> None:
        self.table.claim(lanes)

    def route(self, batch: str, requests: list[RouteRequest]) -> list[str]:
        """Route a batch (the last one still unsettled: overlapped), then settle the last."""
        earlier: list[str] = []
        carried: list[tuple[str, str]] = []
        if self.pending is not None:
            earlier, carried = [self.pending[0]], self.pending[2]
        result, cpu, us = self.probe.time(
            lambda: self.table.route(requests, batch=batch, carried=carried, earlier=earlier)
        )
        self.cost.add("route", cpu, us)
        self.cost.messages += len(requests)
        self.cost.grouped += sum(1 for r in requests if r.guarantee_id is not None)
        decisions: list[str] = result.decisions
        ordinary: set[str] = set()
        finals: list[tuple[str, str]] = []
        for r, d in zip(requests, decisions, strict=True):
            if d in self.dests:
                if r.guarantee_id is None:
                    ordinary.add(d)
                elif r.final:
                    finals.append((r.guarantee_id, r.token))
        self.settle()
        self.pending = (batch, ordinary, finals)
        return decisions

    def route_settled(self, batch: str, requests: list[RouteRequest]) -> list[str]:
        """Route a batch and settle it at once (no batch of this side in flight)."""
        self.settle()
        decisions = self.route(batch, requests)
        self.settle()
        return decisions

    def settle(self) -> None:
        if self.pending is None:
            return
        batch, ordinary, finals = self.pending
        drains = self.drains
        _, cpu, us = self.probe.time(lambda: self.table.settle(batch, ordinary, finals, drains))
        self.cost.add("settle", cpu, us)
        self.pending = None
        # the waiting room's drain, stood in for: the groups admitted since, with their parks
        admitted = self.table._r.hkeys(self.table.keys.admitted)
        self.drains = []
        if admitted:
            raws = self.table._r.hmget(self.table.keys.entries, admitted)
            for gid, raw in zip(admitted, raws, strict=True):
                if raw is not None:
                    self.drains.append((_text(gid), decode_entry(raw).parks))


class Traffic:
    """The send side's source: messages of `load`, each group on one source lane."""

    def __init__(self, load: ScriptLoad, topic: str) -> None:
        self.load = load
        self.rng = random.Random(load.seed)
        self.topic = topic
        self.counter = 0
        self.offsets = [0] * load.source_lanes
        self.slots = [self._new() for _ in range(load.open_groups)]

    def _new(self) -> list[Any]:
        self.counter += 1
        return [f"g{self.counter}", 0, self.rng.randint(self.load.min_group, self.load.max_group)]

    def lanes(self) -> list[str]:
        return [f"{self.topic}/{p}" for p in range(self.load.source_lanes)]

    def batch(self) -> list[RouteRequest]:
        out = []
        load = self.load
        for i in range(load.batch_size):
            if self.rng.random() >= load.grouped:
                gid, final, seq = None, False, 0
                p = (self.counter + i) % load.source_lanes
            else:
                k = self.rng.randrange(len(self.slots))
                gid, seq, length = self.slots[k]
                final = seq == length - 1
                self.slots[k] = self._new() if final else [gid, seq + 1, length]
                p = zlib.crc32(gid.encode()) % load.source_lanes
            out.append(request(gid, final, seq, f"{self.topic}/{p}", self.offsets[p], load.ttl_ms))
            self.offsets[p] += 1
        return out


def request(
    gid: str | None, final: bool, seq: int, lane: str, offset: int, ttl: int
) -> RouteRequest:
    """As `router.unit.steps.route.request_for` makes it for a lane-order member."""
    return RouteRequest(
        gid,
        final,
        ttl,
        f"{lane}/{offset}",
        lane,
        continuation=gid is not None and seq > 0,
        lane_seq=seq if gid is not None else None,
    )


def forwarded(
    requests: list[RouteRequest], decisions: list[str], offsets: dict[str, int], ttl: int
) -> list[RouteRequest]:
    """What the receive side reads of a send-side batch: each message routed straight, on
    its transfer partition (the receive side's lane), in order."""
    out = []
    for r, d in zip(requests, decisions, strict=True):
        if d.startswith("!"):
            continue
        seq = r.lane_seq or 0
        out.append(request(r.guarantee_id, r.final, seq, d, offsets.get(d, 0), ttl))
        offsets[d] = offsets.get(d, 0) + 1
    return out


def run(
    client: redis.Redis, load: ScriptLoad, variants: dict[str, dict[str, str]], rounds: int
) -> dict[str, list[tuple[Cost, Cost]]]:
    """`rounds` runs of `load` per variant (name -> its scripts), alternating: per variant
    and round, the send side's and the receive side's cost."""
    probe = Probe(client)
    out: dict[str, list[tuple[Cost, Cost]]] = {name: [] for name in variants}
    for r in range(rounds):
        for name, scripts in variants.items():
            out[name].append(drive(client, probe, load, scripts, f"{name}-{r}"))
    return out


def drive(
    client: redis.Redis, probe: Probe, load: ScriptLoad, scripts: dict[str, str], topology: str
) -> tuple[Cost, Cost]:
    transfer = [f"transfer/{i}" for i in range(load.transfer)]
    queues = [f"queue/{i}" for i in range(load.queues)]
    send = Side(client, probe, topology, "send", transfer, load, scripts)
    receive = Side(client, probe, topology, "receive", queues, load, scripts)
    traffic = Traffic(load, "sendq")
    send.claim(traffic.lanes())
    receive.claim(transfer)
    offsets: dict[str, int] = {}
    try:
        for b in range(load.warmup + load.batches):
            if b == load.warmup:
                send.cost, receive.cost = Cost(), Cost()
            if load.pace_ms:
                time.sleep(load.pace_ms / 1000)
            requests = traffic.batch()
            decisions = send.route(f"s{b}", requests)
            onward = forwarded(requests, decisions, offsets, load.ttl_ms)
            if onward:
                receive.route(f"r{b}", onward)
        send.settle()
        receive.settle()
    finally:
        send.table.drop()
        receive.table.drop()
    return send.cost, receive.cost


def figures(rounds: list[tuple[Cost, Cost]]) -> str:
    """µs of Redis CPU per grouped message (medians of the rounds), both sides together
    against the goal, the scripts' wall time, and route and settle per side."""
    parts = []
    for i, side in enumerate(("send", "receive")):
        route = median(c[i].per_grouped("route") for c in rounds)
        settle = median(c[i].per_grouped("settle") for c in rounds)
        parts.append(f"{side} {route + settle:.2f} (route {route:.2f}, settle {settle:.2f})")
    total = median(c[0].per_grouped() + c[1].per_grouped() for c in rounds)
    wall = median(c[0].per_grouped(wall=True) + c[1].per_grouped(wall=True) for c in rounds)
    return (
        f"{total:.2f} us of Redis CPU per grouped message, both sides (goal <= {GOAL_US:g}; "
        f"{wall:.2f} us in scripts, commandstats): " + "; ".join(parts)
    )


def lines(load: ScriptLoad, results: dict[str, list[tuple[Cost, Cost]]]) -> Iterator[str]:
    """The load, then per variant its figures."""
    yield f"{load.name}: {load.label()}"
    for name, rounds in results.items():
        yield f"  {name}: {figures(rounds)}"


# The load `kinds`: each kind of message alone, beside the grouped load's open groups.
KIND_LABEL = (
    "us of Redis CPU per message of each kind, both sides (route and settle), batches of "
    "500 of one kind beside 10,000 open groups, share"
)


def kind_batches(
    cycle: int, size: int, lanes: list[str], ttl: int
) -> Iterator[tuple[str, list[RouteRequest]]]:
    """One cycle's batches, (kind, requests): the first messages of `size` new groups, a
    middle one of each, their finals, then as many ordinary messages; each group on one
    lane (the bench Sender's), each lane's offsets counted on from the last cycle."""
    gids = [f"k{cycle}-{i}" for i in range(size)]
    lane_of = {g: lanes[zlib.crc32(g.encode()) % len(lanes)] for g in gids}
    step = cycle * 4 * size  # each batch's offsets past the last's, on every lane
    for k, kind in enumerate(KINDS):
        base = step + k * size
        if kind == "ordinary":
            batch = [
                request(None, False, 0, lanes[i % len(lanes)], base + i, ttl) for i in range(size)
            ]
        else:
            seq = KINDS.index(kind)
            batch = [
                request(g, kind == "final", seq, lane_of[g], base + i, ttl)
                for i, g in enumerate(gids)
            ]
        yield kind, batch


def drive_kinds(
    client: redis.Redis,
    probe: Probe,
    scripts: dict[str, str],
    topology: str,
    cycles: int = 30,
    background: int = 10_000,
) -> dict[str, tuple[Cost, Cost]]:
    """Per kind, the send and the receive side's cost: `background` groups opened first
    (never finished: the table as full as under the grouped load), then `cycles` cycles of
    `kind_batches`, each batch routed and settled on the send side, then what went
    straight routed and settled on the receive side."""
    load = GROUPED
    transfer = [f"transfer/{i}" for i in range(load.transfer)]
    queues = [f"queue/{i}" for i in range(load.queues)]
    send = Side(client, probe, topology, "send", transfer, load, scripts)
    receive = Side(client, probe, topology, "receive", queues, load, scripts)
    lanes = [f"sendq/{p}" for p in range(load.source_lanes)]
    send.claim(lanes)
    receive.claim(transfer)
    offsets: dict[str, int] = {}
    costs = {kind: (Cost(), Cost()) for kind in KINDS}
    size = load.batch_size

    def both(batch: str, requests: list[RouteRequest]) -> None:
        decisions = send.route_settled(f"s{batch}", requests)
        onward = forwarded(requests, decisions, offsets, load.ttl_ms)
        if onward:
            receive.route_settled(f"r{batch}", onward)

    try:
        for b in range(background // size):  # the open groups, not measured
            both(f"bg{b}", next(kind_batches(-1 - b, size, lanes, load.ttl_ms))[1])
        for c in range(cycles):
            for kind, requests in kind_batches(c, size, lanes, load.ttl_ms):
                send.cost, receive.cost = costs[kind]
                both(f"{c}{kind}", requests)
    finally:
        send.table.drop()
        receive.table.drop()
    return costs


def kind_rounds(
    client: redis.Redis, scripts: dict[str, str], rounds: int, cycles: int = 30
) -> list[dict[str, tuple[Cost, Cost]]]:
    probe = Probe(client)
    return [drive_kinds(client, probe, scripts, f"kinds-{r}", cycles) for r in range(rounds)]


def kind_figures(rounds: list[dict[str, tuple[Cost, Cost]]]) -> str:
    """Per kind, µs of Redis CPU per message through both sides (medians of the rounds)."""
    parts = []
    for kind in KINDS:
        both = [r[kind][0].per_message() + per_sent(r[kind]) for r in rounds]
        parts.append(f"{kind} {median(both):.2f}")
    return ", ".join(parts)


def per_sent(pair: tuple[Cost, Cost]) -> float:
    """The receive side's CPU per message the send side routed."""
    send, receive = pair
    return sum(receive.cpu.values()) / send.messages if send.messages else 0.0


def script_costs(
    settings: RedisSettings, batches: int = 100, rounds: int = 1, beside: int = 0
) -> list[str]:
    """`make bench`'s lines: this checkout's scripts on every load, on the bench's Redis,
    `batches` measured after as many as 20 unmeasured, then each kind of message alone
    (cycles of four batches, a quarter as many); then, with `beside` rounds, the grouped
    load side by side with the scripts before issue 30 (`side_by_side`)."""
    client: Any = redis_client(settings)
    out = []
    for each in LOADS.values():
        load = replace(each, batches=batches, warmup=min(each.warmup, batches))
        result = run(client, load, {"scripts": this_scripts()}, rounds)["scripts"]
        out.append(f"{load.name} ({load.label()}): {figures(result)}")
    cycles = max(5, min(30, batches // 4))
    kinds = kind_rounds(client, this_scripts(), rounds, cycles)
    out.append(f"kinds ({KIND_LABEL}): {kind_figures(kinds)}")
    if beside:
        out.append(side_by_side(settings, batches, beside))
    return out


# The scripts as they were when issue 30 asked for a third of their cost (Redis CPU per
# grouped message on one machine swings about twofold from day to day, so the goal's
# figure is read side by side with them: docs/explanation/performance.md).
BEFORE = "0f7b42c"
THIRD = 6.0 / 18.0  # the goal: <= 6 us against about 17-20 then


def side_by_side(settings: RedisSettings, batches: int, rounds: int) -> str:
    """The grouped load under `BEFORE`'s table and this checkout's, in alternating rounds,
    each in a process of its own (`child_round`), on the same Redis: both medians and the
    median of the rounds' ratios. A line saying why if it cannot be measured (the
    revision not in this clone's history, a Redis the plain URL does not reach)."""
    label = f"grouped, side by side with the scripts before issue 30 ({BEFORE}"
    if settings.username or settings.secret() or settings.sentinels or settings.cluster_nodes:
        return f"{label}): not measured (the comparison reaches Redis by its plain URL only)"
    args = argparse.Namespace(redis_url=settings.url, batches=batches)
    pairs: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            base = revision_router(BEFORE, tmp)
        except (OSError, subprocess.CalledProcessError) as exc:
            why = getattr(exc, "stderr", b"") or str(exc).encode()
            return f"{label}): not measured, no such revision here ({why.decode().strip()})"
        for _ in range(rounds):
            got = [costs_of(child_round(r, "grouped", args)) for r in (base, "")]
            pairs.append(tuple(c[0].per_grouped() + c[1].per_grouped() for c in got))
    before = median(b for b, _ in pairs)
    now = median(n for _, n in pairs)
    ratio = median(n / b for b, n in pairs if b)
    each = f"{rounds} alternating round{'s' * (rounds != 1)}, each in a process of its own"
    return (
        f"{label}, {each}): {before:.2f} -> "
        f"{now:.2f} us of Redis CPU per grouped message, both sides; now / before {ratio:.2f} "
        f"(goal: about a third, <= {THIRD:.2f})"
    )


# A round in a process of its own: the router package of `sys.argv[1]` (a directory holding a
# revision's `router/`; '' for this checkout's) under this checkout's driver.
CHILD = (
    "import runpy, sys; d = sys.argv.pop(1); d and sys.path.insert(0, d); "
    "runpy.run_module('ops.harness.benchmark.scriptcost', run_name='__main__')"
)


def revision_router(revision: str, into: str) -> str:
    """`into`, holding the `router/` package as it is at `revision`."""
    archive = subprocess.run(
        ["git", "archive", revision, "router"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return into


def child_round(router: str, load: str, args: argparse.Namespace) -> Any:
    """One round of `load` in a process of its own, with `router`'s table: its costs."""
    argv = ["--json", "--rounds", "1", "--load", load, "--redis-url", args.redis_url]
    if args.batches:
        argv += ["--batches", str(args.batches)]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, router, *argv],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.splitlines()[-1])["rounds"][0]


def costs_of(raw: Any) -> Any:
    """A round's costs, as `--json` writes them, as Cost objects again."""
    if isinstance(raw, dict):
        return {kind: costs_of(pair) for kind, pair in raw.items()}
    return (Cost(**raw[0]), Cost(**raw[1]))


def measure(client: redis.Redis, load: ScriptLoad | None, rounds: int) -> list[Any]:
    """`rounds` rounds of this checkout's table under one load (None: `kinds`)."""
    if load is None:
        return kind_rounds(client, this_scripts(), rounds)
    return run(client, load, {"this checkout": this_scripts()}, rounds)["this checkout"]


def report(name: str, results: dict[str, list[Any]]) -> Iterator[str]:
    if name == "kinds":
        yield f"kinds: {KIND_LABEL}"
        for variant, rounds in results.items():
            yield f"  {variant}: {kind_figures(rounds)}"
    else:
        yield from lines(LOADS[name], results)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--load", default="grouped,unsaturated,kinds", help=f"of {', '.join(LOADS)}, kinds"
    )
    parser.add_argument("--baseline", default=None, help="a git revision's table beside")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="the costs as JSON (a round's)")
    args = parser.parse_args()
    names = [n.strip() for n in args.load.split(",")]
    if unknown := [n for n in names if n not in LOADS and n != "kinds"]:
        parser.error(f"unknown loads: {', '.join(unknown)}")
    client = redis.Redis.from_url(args.redis_url)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        base = revision_router(args.baseline, tmp) if args.baseline else None
        for name in names:
            load = LOADS.get(name)
            if load is not None and args.batches:
                load = replace(load, batches=args.batches)
            if args.json:
                got = measure(client, load, args.rounds)
                rounds = [
                    {k: [asdict(c) for c in pair] for k, pair in r.items()}
                    if isinstance(r, dict)
                    else [asdict(c) for c in r]
                    for r in got
                ]
                print(json.dumps({"load": name, "rounds": rounds}), flush=True)
                continue
            if base is None:
                results = {"this checkout": measure(client, load, args.rounds)}
            else:  # alternating rounds, each in a process of its own
                results = {args.baseline: [], "this checkout": []}
                for _ in range(args.rounds):
                    for variant, router in ((args.baseline, base), ("this checkout", "")):
                        results[variant].append(costs_of(child_round(router, name, args)))
            for line in report(name, results):
                print(line, flush=True)
    if not args.json:
        print(f"({time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
