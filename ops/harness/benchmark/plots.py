"""The benchmark's plots (matplotlib, from the `bench` extra): routing cost, throughput by
size, latency at half load, scaling, latency over offered load and CPU per message."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ops.harness.benchmark.model import (
    JAVA_CHAINED,
    JAVA_RELAY,
    PATH,
    PY_CHAINED,
    PY_RELAY,
    RECEIVE,
    SEND,
    Results,
    Workload,
)


def plots(results: Results, out_dir: Path) -> list[Path]:
    # matplotlib comes with the `bench` extra only: the router itself does not need it.
    import matplotlib  # noqa: PLC0415 (optional: the `bench` extra)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (optional: the `bench` extra)

    written = []
    # 1. Routing cost: each unit's throughput against its raw relay, per workload.
    units = [t for t in results.throughput if t.stage in (SEND, RECEIVE) and t.processes == 1]
    labels = list(dict.fromkeys(t.workload.label for t in units))
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.4
    for i, stage in enumerate((SEND, RECEIVE)):
        ys = []
        for label in labels:
            t = next((x for x in units if x.stage == stage and x.workload.label == label), None)
            ref = results.baseline(t) if t else 0.0
            ys.append(t.msg_s / ref if t and ref else 0)
        ax.bar([x + i * width for x in range(len(labels))], ys, width, label=stage)
    ax.axhline(0.8, color="grey", linestyle="--", linewidth=1, label="target 0.8")
    ax.set_xticks(
        [x + width / 2 for x in range(len(labels))], labels, rotation=60, ha="right", fontsize=7
    )
    ax.set_ylabel("throughput / raw relay")
    ax.set_title("What routing costs: unit throughput relative to a raw relay")
    ax.legend()
    fig.tight_layout()
    written.append(out_dir / "routing-cost.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    # 2. Throughput by message size (MB/s), every stage at the key grouping.
    key = results.spec.key()
    stages = [
        PY_RELAY,
        JAVA_RELAY,
        SEND,
        "raw relay (receive side)",
        RECEIVE,
        PY_CHAINED,
        JAVA_CHAINED,
        PATH,
    ]
    fig, ax = plt.subplots(figsize=(10, 5))
    sizes = list(results.spec.sizes)
    bar = 0.8 / len(stages)
    for j, stage in enumerate(stages):
        ys = []
        for s in sizes:
            t = results.find(stage, Workload(s, key.grouped, key.open_groups))
            ys.append(t.mb_s if t else 0)
        ax.bar([x + j * bar for x in range(len(sizes))], ys, bar, label=stage)
    ax.set_xticks([x + 0.4 - bar / 2 for x in range(len(sizes))], [f"{s:,} B" for s in sizes])
    ax.set_ylabel("MB/s")
    ax.set_title(
        f"Throughput by message size ({key.grouped:.0%} grouped, {key.open_groups:,} open groups)"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(out_dir / "throughput-by-size.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    # 3. Latency percentiles at half load (the highest offered load).
    if results.latency:
        half = max(x.rate for x in results.latency)
        at_half = [x for x in results.latency if x.rate == half]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        names = ["p50", "p99", "p99.9"]
        bar = 0.8 / len(at_half)
        for j, lat in enumerate(at_half):
            ax.bar(
                [x + j * bar for x in range(3)],
                [lat.p50_ms, lat.p99_ms, lat.p999_ms],
                bar,
                label=f"{lat.path} ({lat.rate:,.0f} msg/s)",
            )
        ax.set_xticks([x + 0.4 - bar / 2 for x in range(3)], names)
        ax.set_ylabel("end-to-end latency (ms)")
        ax.set_title("Latency at half the whole path's maximum load")
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(out_dir / "latency.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)

    # 4. Scaling.
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for j, stage in enumerate((PY_RELAY, SEND)):
        ys = [(t.msg_s if (t := results.find(stage, key, n)) else 0) for n in (1, 2)]
        ax.bar([x + j * 0.4 for x in range(2)], ys, 0.4, label=stage)
    ax.set_xticks([0.2, 1.2], ["1 process", "2 processes"])
    ax.set_ylabel("msg/s")
    ax.set_title(f"Scaling on {os.cpu_count()} cores ({key.label})", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(out_dir / "scaling.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    if results.latency:
        written.append(latency_over_load(plt, results, out_dir / "latency-over-load.png"))
    written.append(cpu_per_message(plt, results, out_dir / "cpu-per-message.png"))
    return written


def latency_over_load(plt: Any, results: Results, path: Path) -> Path:
    """p50 (solid) and p99 (dashed) against offered load, per path."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for name in (PATH, JAVA_CHAINED, PY_CHAINED):
        runs = sorted((x for x in results.latency if x.path == name), key=lambda x: x.rate)
        if not runs:
            continue
        rates = [x.rate for x in runs]
        (line,) = ax.plot(rates, [x.p50_ms for x in runs], marker="o", label=f"{name} p50")
        ax.plot(
            rates,
            [x.p99_ms for x in runs],
            marker="s",
            linestyle="--",
            color=line.get_color(),
            label=f"{name} p99",
        )
    ax.set_xlabel("offered load (msg/s)")
    ax.set_ylabel("end-to-end latency (ms)")
    ax.set_yscale("log")
    ax.set_title(f"Latency over offered load ({results.spec.key().label})", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def cpu_per_message(plt: Any, results: Results, path: Path) -> Path:
    """CPU seconds per million messages of each one-process stage (median of its runs),
    per headline workload and message size at the key grouping; and Redis's own."""
    key = results.spec.key()
    workloads = list(
        dict.fromkeys(
            [*results.spec.headline_workloads().values()]
            + [Workload(s, key.grouped, key.open_groups) for s in results.spec.sizes]
        )
    )
    stages = [PY_RELAY, JAVA_RELAY, SEND, "raw relay (receive side)", RECEIVE]
    stages += [PY_CHAINED, JAVA_CHAINED, PATH]
    fig, (ax, rx) = plt.subplots(1, 2, figsize=(13, 5), width_ratios=(3, 1))
    bar = 0.8 / len(stages)
    for j, stage in enumerate(stages):
        ys = []
        for w in workloads:
            runs = [
                t.cpu_s_per_million
                for t in results.throughput
                if t.stage == stage and t.workload == w and t.processes == 1
            ]
            ys.append(sorted(runs)[len(runs) // 2] if runs else 0)
        ax.bar([x + j * bar for x in range(len(workloads))], ys, bar, label=stage)
    ax.set_xticks(
        [x + 0.4 - bar / 2 for x in range(len(workloads))],
        [w.label for w in workloads],
        rotation=20,
        ha="right",
        fontsize=7,
    )
    ax.set_ylabel("CPU s per million messages (processes of the stage)")
    ax.set_title("CPU per message", fontsize=10)
    ax.legend(fontsize=7)
    units = [t for t in results.throughput if t.stage in (SEND, RECEIVE) and t.redis_script_calls]
    labels = list(dict.fromkeys(f"{t.stage}\n{t.workload.label}" for t in units))
    cpu = {f"{t.stage}\n{t.workload.label}": t.redis_cpu_us_per_msg for t in reversed(units)}
    script = {f"{t.stage}\n{t.workload.label}": t.redis_script_us_per_msg for t in reversed(units)}
    rows = list(range(len(labels)))
    rx.barh([y + 0.2 for y in rows], [cpu[x] for x in labels], 0.4, label="server CPU")
    rx.barh([y - 0.2 for y in rows], [script[x] for x in labels], 0.4, label="in scripts")
    rx.set_yticks(rows, labels, fontsize=6)
    rx.set_xlabel("Redis us per message")
    rx.set_title("Redis's own cost", fontsize=10)
    rx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
