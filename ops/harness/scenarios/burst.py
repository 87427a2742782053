"""The burst of the waiting-room issue: far more groups open at once than destinations.

Two plain Kafka producers (the README's headers only, no router client), one per send
queue of the default topology (2 send queues of 3 partitions, 3 transfer partitions, 3
receive queues), send about 300 groups of up to 12 messages and 30% ordinary messages as
fast as they can, each keeping 150 groups open: groups start far faster than they finish.

`burst_stats` reads the figures off what the receive queues hold (broker append times
against the senders' create times), never off the router's counters:

* throughput: messages over the time from the first create to the last append;
* ordinary latency: append minus create, per ordinary message;
* group latency: the final's append minus the first message's create, per group;
* interleavings per side, from the independent verdict (capacity rule);
* each side's hop, per message: the send side's from its create time to its append on the
  transfer topic (the waiting room's two transactional hops included, for a message that
  waited there), the receive side's from that append to its append on a receive queue.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ops.harness.console import Console
from ops.harness.scenarios.demo_run import DemoResult, run_pipeline_workload
from ops.harness.stack.pipeline import Pipeline, PipelineSpec
from ops.harness.stats import percentile
from ops.harness.traffic.workload import WorkloadSpec
from ops.harness.verdict.records import Seen, first_copies

GROUPS = 300
OPEN_PER_SENDER = 150


# The variants `make bench` compares: busy policy and extra environment.
VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "share": ("share", {}),
    "wait": ("wait", {}),
    "whole": ("wait", {"ROUTER_ROUTING__DEFAULT_DELIVERY": "complete"}),  # every group whole
}


def burst_spec(policy: str, **extra_env: str) -> PipelineSpec:
    """The default topology and unit counts under `policy`."""
    return PipelineSpec(
        busy_policy=policy,  # type: ignore[arg-type]
        send_units=2,
        receive_units=3,
        sweepers=1,
        send_queues=2,
        send_queue_partitions=3,
        transfer_partitions=3,
        receive_queues=3,
        extra_env=dict(extra_env),
    )


def burst_workload(run_id: str, seed: int = 7) -> WorkloadSpec:
    # ~6.5 messages per group on average (sizes 1..12): 3,000 messages hold ~300 groups
    return WorkloadSpec(
        run_id=run_id,
        senders=2,
        messages=3_000,
        grouped_fraction=0.7,
        max_group=12,
        open_per_sender=OPEN_PER_SENDER,
        rate=None,
        seed=seed,
        plain=True,
    )


def all_open_workload(run_id: str, groups: int, seed: int = 7) -> WorkloadSpec:
    """The burst with every group open before any final (`WorkloadSpec.phased`): `groups`
    groups of 2..4 messages (3 on average) and 10% ordinary messages from two plain
    producers."""
    grouped = groups * 3
    return WorkloadSpec(
        run_id=run_id,
        senders=2,
        messages=round(grouped / 0.9),
        grouped_fraction=0.9,
        max_group=4,
        rate=None,
        seed=seed,
        plain=True,
        phased=True,
    )


def run_all_open(
    pipeline: Pipeline,
    groups: int,
    say: Console | Callable[[str], None],
    seed: int = 7,
    timeout: float = 900,
) -> tuple[DemoResult, BurstStats]:
    """`groups` groups all open at once through a started pipeline: its verdict and figures,
    labelled with the group count."""
    spec = all_open_workload(pipeline.name, groups, seed)
    result = run_pipeline_workload(pipeline, spec, say, timeout)
    return result, burst_stats(f"{groups}", result)


@dataclass(frozen=True)
class BurstStats:
    policy: str
    messages: int
    groups: int
    seconds: float  # first create -> last append on a receive queue
    ordinary_ms: tuple[float, float]  # p50, p99
    group_ms: tuple[float, float]  # p50, p99 (first create -> final appended)
    interleaved: tuple[int, int]  # send side, receive side
    violations: tuple[str, ...]
    # p50, p99 of each side's hop: create -> transfer append, transfer -> receive append
    send_hop_ms: tuple[float, float] = (float("nan"), float("nan"))
    receive_hop_ms: tuple[float, float] = (float("nan"), float("nan"))

    @property
    def throughput(self) -> float:
        return self.messages / max(self.seconds, 1e-9)

    def row(self) -> str:
        return (
            f"{self.policy:<8} {self.messages:>6} {self.groups:>6} {self.throughput:>9,.0f} "
            f"{self.ordinary_ms[0]:>8,.0f} {self.ordinary_ms[1]:>8,.0f} "
            f"{self.group_ms[0]:>8,.0f} {self.group_ms[1]:>8,.0f} "
            f"{self.send_hop_ms[0]:>4,.0f}/{self.send_hop_ms[1]:<5,.0f} "
            f"{self.receive_hop_ms[0]:>4,.0f}/{self.receive_hop_ms[1]:<5,.0f} "
            f"{self.interleaved[0]:>6} {self.interleaved[1]:>6}  "
            + ("PASS" if not self.violations else f"FAIL {self.violations[0]}")
        )


HEADER = (
    f"{'policy':<8} {'msgs':>6} {'groups':>6} {'msg/s':>9} {'ord p50':>8} {'ord p99':>8} "
    f"{'grp p50':>8} {'grp p99':>8} {'send hop':>10} {'recv hop':>10} {'il.snd':>6} "
    f"{'il.rcv':>6}  verdict   (latencies in ms; a hop: p50/p99)"
)


def burst_stats(policy: str, result: DemoResult) -> BurstStats:
    assert result.reads is not None, "the run's final read"
    received = result.reads[1].records
    created = [r.created_ms for r in received if r.created_ms is not None]
    appended = [r.append_ms for r in received if r.append_ms is not None]
    ordinary = [
        float(r.append_ms - r.created_ms)
        for r in received
        if r.group is None and r.append_ms is not None and r.created_ms is not None
    ]
    first: dict[str, int] = {}
    done: dict[str, int] = {}
    for r in received:
        if r.group is None or r.created_ms is None or r.append_ms is None:
            continue
        if r.seq == 0:
            first[r.group] = r.created_ms
        if r.final:
            done[r.group] = r.append_ms
    groups = [float(done[g] - first[g]) for g in done if g in first]
    send_hop, receive_hop = hops(result.reads[0].records, received)
    report = result.report
    return BurstStats(
        policy,
        len(received),
        len(done),
        (max(appended) - min(created)) / 1000 if created and appended else 0.0,
        (percentile(ordinary, 0.5), percentile(ordinary, 0.99)),
        (percentile(groups, 0.5), percentile(groups, 0.99)),
        (
            report.send.interleaved if report.send else -1,
            report.receive.interleaved if report.receive else -1,
        ),
        tuple(result.violations),
        (percentile(send_hop, 0.5), percentile(send_hop, 0.99)),
        (percentile(receive_hop, 0.5), percentile(receive_hop, 0.99)),
    )


def hops(transfer: Sequence[Seen], received: Sequence[Seen]) -> tuple[list[float], list[float]]:
    """Each message's send-side hop (create -> its first copy's append on the transfer
    topic) and receive-side hop (that append -> its first copy's append on a receive
    queue), in ms, from what the queues hold."""
    on_transfer = {r.event_id: r for r in first_copies(transfer)[0]}
    send = [
        float(r.append_ms - r.created_ms)
        for r in on_transfer.values()
        if r.append_ms is not None and r.created_ms is not None
    ]
    receive = []
    for r in first_copies(received)[0]:
        t = on_transfer.get(r.event_id)
        if t is not None and t.append_ms is not None and r.append_ms is not None:
            receive.append(float(r.append_ms - t.append_ms))
    return send, receive


def run_burst(
    pipeline: Pipeline,
    say: Console | Callable[[str], None],
    seed: int = 7,
    timeout: float = 600,
    label: str = "",
) -> tuple[DemoResult, BurstStats]:
    """The burst through a started pipeline; its verdict and figures (labelled with the
    busy policy unless `label` says otherwise)."""
    result = run_pipeline_workload(pipeline, burst_workload(pipeline.name, seed), say, timeout)
    return result, burst_stats(label or pipeline.spec.busy_policy, result)


def burst_report(rounds: Sequence[dict[str, BurstStats]]) -> list[str]:
    """The markdown section of `make bench` for rounds of {variant: stats}, the first
    variant the baseline (`share`): every row, each other variant's ratios to the
    baseline per round (throughput, ordinary p99, group p99), their medians and the
    interleavings in all."""
    names = list(rounds[0])
    base, others = names[0], names[1:]

    def ratios(name: str) -> list[tuple[float, float, float]]:
        return [
            (
                r[name].throughput / max(r[base].throughput, 1e-9),
                r[name].ordinary_ms[1] / max(r[base].ordinary_ms[1], 1e-9),
                r[name].group_ms[1] / max(r[base].group_ms[1], 1e-9),
            )
            for r in rounds
        ]

    lines = [
        "",
        "## Burst of open groups (ops/harness/scenarios/burst.py)",
        "",
        "```",
        "round " + HEADER,
        *(f"{n + 1:>5} {st.row()}" for n, r in enumerate(rounds) for st in r.values()),
        "```",
        "",
    ]
    for name in others:
        per = ratios(name)
        med = [statistics.median(x[i] for x in per) for i in range(3)]
        lines += [
            f"{name}/{base} per round: "
            + "; ".join(f"{t:.2f} / {o:.2f} / {g:.2f}" for t, o, g in per)
            + " (throughput / ordinary p99 / group p99)",
            f"{name}/{base}, median of {len(rounds)} rounds: throughput {med[0]:.2f}, "
            f"ordinary p99 {med[1]:.2f}, group p99 {med[2]:.2f}",
        ]
    lines.append(
        "interleaved in all rounds: "
        + ", ".join(f"{n} {sum(sum(r[n].interleaved) for r in rounds)}" for n in names)
    )
    return lines
