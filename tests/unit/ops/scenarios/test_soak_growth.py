"""The soak's growth check on synthetic series (no servers): flat, noisy, spiky and
restarted series pass; a leak of a steady slope fails, by its stated bound."""

from __future__ import annotations

import random

from ops.harness.scenarios.soak_growth import (
    BOUNDS,
    MIB,
    Bound,
    bounds_for,
    judge,
    judge_all,
    judge_rss,
    longest_life,
    slope,
    steady,
)

MINUTES = 30
TIMES = [5.0 * i for i in range(MINUTES * 12)]  # a sample every 5 s
END = TIMES[-1]


def series(level: float, per_s: float = 0.0, noise: float = 0.0, seed: int = 1) -> list:
    rng = random.Random(seed)
    return [(t, level + per_s * t + rng.uniform(-noise, noise)) for t in TIMES]


def test_a_flat_noisy_series_passes() -> None:
    points = steady(series(80 * MIB, noise=5 * MIB), 0, END, 0.2)
    g = judge("rss:send-unit#2", points, BOUNDS["rss"])
    assert g is not None and not g.fails
    assert abs(g.growth) < 5 * MIB
    assert g.allowed == 30 * MIB  # max(30 MiB, 20 % of 80 MiB)


def test_a_leak_fails_once_past_both_parts_of_the_bound() -> None:
    # 150 MiB/h over the steady 24 minutes: the thirds' medians ~40 MiB apart
    leak = steady(series(80 * MIB, per_s=150 * MIB / 3600), 0, END, 0.2)
    g = judge("rss:receive-unit#3", leak, BOUNDS["rss"])
    assert g is not None and g.fails, g.line()
    assert 140 * MIB < g.slope_per_h < 160 * MIB
    assert "FAIL" in g.line()
    # the same growth on a large process is inside its relative part (20 % of 1 GiB)
    big = steady(series(1024 * MIB, per_s=150 * MIB / 3600), 0, END, 0.2)
    g = judge("rss:receive-unit#3", big, BOUNDS["rss"])
    assert g is not None and not g.fails


def test_spikes_at_either_end_do_not_decide() -> None:
    points = series(100.0)
    # a fault every minute: lag jumps for 20 s, including in the very last samples
    spiky = [(t, v + (5_000 if t % 60 < 20 else 0)) for t, v in points]
    g = judge("lag:send", steady(spiky, 0, END, 0.2), bounds_for(100.0)["lag"])
    assert g is not None and not g.fails, g.line()


def test_a_hash_that_gains_a_field_per_fault_fails() -> None:
    # the writers hash before sweeper.writer_idle_s could be set short: +1 field a minute
    writers = [(t, 7.0 + t // 60) for t in TIMES]
    g = judge("table:send:writers", steady(writers, 0, END, 0.2), BOUNDS["table"])
    assert g is not None and g.fails, g.line()
    # ... and one that is pruned to a plateau passes
    pruned = [(t, 7.0 + min(t // 60, 4)) for t in TIMES]
    g = judge("table:send:writers", steady(pruned, 0, END, 0.2), BOUNDS["table"])
    assert g is not None and not g.fails, g.line()


def test_topic_sizes_are_reported_never_failed() -> None:
    growing = series(0.0, per_s=100.0)
    (g,) = judge_all({"topic:t.send.0": growing}, BOUNDS, 0, END)
    assert g.growth > 0 and not g.judged and not g.fails
    assert "reported" in g.line()


def test_judge_all_uses_each_family_bound_and_skips_unknown_names() -> None:
    found = judge_all(
        {
            "redis_keys": series(60.0, noise=2),
            "redis_memory": series(4 * MIB, per_s=50_000.0),  # +~24 MiB over the window
            "something_else": series(1.0, per_s=1.0),
        },
        BOUNDS,
        0,
        END,
    )
    by_name = {g.name: g for g in found}
    assert set(by_name) == {"redis_keys", "redis_memory"}
    assert not by_name["redis_keys"].fails
    assert by_name["redis_memory"].fails


def test_lag_bound_is_ten_seconds_of_traffic() -> None:
    assert bounds_for(200.0)["lag"].allowed(0.0) == 2_000.0
    assert bounds_for(200.0)["lag"].allowed(10_000.0) == 5_000.0


def test_too_few_samples_say_nothing() -> None:
    assert judge("redis_keys", [(0.0, 1.0), (5.0, 9.0)], BOUNDS["redis_keys"]) is None


def test_slope() -> None:
    assert slope([(0.0, 1.0), (10.0, 21.0), (20.0, 41.0)]) == 2.0
    assert slope([(3.0, 1.0)]) == 0.0
    assert slope([(3.0, 1.0), (3.0, 5.0)]) == 0.0


def test_a_slot_is_judged_over_its_longest_lived_process_only() -> None:
    # slot 1: killed every 5 minutes, each replacement starts small and warms up
    restarted = [(t, 40 * MIB + (t % 300) * 0.1 * MIB, int(t // 300)) for t in TIMES]
    # slot 2: one process all along, flat
    lived = [(t, 70 * MIB, 999) for t in TIMES]
    # slot 3: one process all along, leaking 100 MiB/h
    leaking = [(t, 70 * MIB + t * 150 * MIB / 3600, 1000) for t in TIMES]
    found = judge_rss(
        {"rss:send-unit#1": restarted, "rss:send-unit#2": lived, "rss:send-unit#3": leaking},
        BOUNDS["rss"],
        0,
        END,
    )
    by_name = {g.name: g for g in found}
    assert not by_name["rss:send-unit#1"].judged  # a 5-minute life: reported only
    assert by_name["rss:send-unit#2"].judged and not by_name["rss:send-unit#2"].fails
    assert by_name["rss:send-unit#3"].fails
    assert len(longest_life(restarted)) == 60
    assert longest_life([]) == []


def test_a_bound_is_the_larger_of_its_parts() -> None:
    b = Bound(10, 0.1)
    assert b.allowed(50) == 10 and b.allowed(500) == 50 and b.allowed(-500) == 50
