"""The soak's plots (matplotlib, from the `bench` extra): one PNG per family of series (RSS
per slot, Redis memory, Redis keys, the tables' sizes, topic sizes, consumer lag), with
the faults as vertical lines and the start of the judged (steady) window shaded off."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ops.harness.scenarios.soak_growth import MIB, Point, family

TITLES = {
    "rss": ("Resident memory per process slot", "MiB"),
    "redis_memory": ("Redis used_memory", "MiB"),
    "redis_keys": ("Redis keys (DBSIZE)", "keys"),
    "table": ("Table sizes (fields, members, items)", "count"),
    "topic": ("Topic sizes (messages held)", "messages"),
    "lag": ("Consumer-group lag", "messages"),
}


def plots(
    series: dict[str, list[Point]],
    faults: Sequence[float],
    steady_from: float,
    steady_to: float,
    out_dir: Path,
) -> list[Path]:
    # matplotlib comes with the `bench` extra only: the router itself does not need it.
    import matplotlib  # noqa: PLC0415 (optional: the `bench` extra)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (optional: the `bench` extra)

    written = []
    for fam, (title, unit) in TITLES.items():
        names = sorted(n for n in series if family(n) == fam)
        if not names:
            continue
        scale = MIB if unit == "MiB" else 1.0
        fig, ax = plt.subplots(figsize=(11, 5))
        for n in names:
            ts = [t / 60 for t, _ in series[n]]
            ax.plot(ts, [v / scale for _, v in series[n]], label=n.split(":", 1)[-1], lw=1)
        for i, f in enumerate(faults):
            ax.axvline(f / 60, color="grey", lw=0.5, ls=":", label="fault" if i == 0 else None)
        ax.axvspan(steady_from / 60, steady_to / 60, color="green", alpha=0.06, label="judged")
        ax.set_xlabel("minutes")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.legend(fontsize=7, ncol=2 if len(names) > 8 else 1, loc="upper left")
        fig.tight_layout()
        path = out_dir / f"soak-{fam.replace('_', '-')}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
