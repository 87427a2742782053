"""Pure logic of the benchmark driver: the workload model and the reported figures."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from ops.harness.benchmark.load import GroupModel, payloads
from ops.harness.benchmark.measure import RedisSnapshot, SteadyRedis, _done
from ops.harness.benchmark.model import (
    GROUPED_ONLY,
    JAVA_CHAINED,
    JAVA_RELAY,
    KEY,
    ORDINARY,
    PATH,
    PY_CHAINED,
    PY_RELAY,
    RECEIVE,
    SEND,
    TRACED,
    TRACED_10,
    TRACING_OFF,
    TRACING_ON,
    UNSATURATED,
    BenchSpec,
    Latency,
    Results,
    Throughput,
    Workload,
)
from ops.harness.benchmark.report import redis_costs, summary, table
from ops.harness.benchmark.trace import counter, histogram_means


@pytest.mark.parametrize("grouped", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("open_groups", [10, 1000])
def test_group_model_keeps_groups_well_formed(grouped: float, open_groups: int) -> None:
    model = GroupModel(Workload(100, grouped, open_groups), seed=1, prefix="t")
    seqs: dict[str, list[int]] = defaultdict(list)
    finals: Counter[str] = Counter()
    ordinary = 0
    n = 20_000
    for _ in range(n):
        gid, final, seq = model.next()
        if gid is None:
            ordinary += 1
            assert not final
            continue
        assert not finals[gid], f"{gid} continued after its final"
        seqs[gid].append(seq)
        finals[gid] += final
    # Sequence numbers count up from 0 within every group.
    assert all(s == list(range(len(s))) for s in seqs.values())
    assert ordinary / n == pytest.approx(1 - grouped, abs=0.02)
    # Never more groups open at once than the model's slots.
    open_now = sum(1 for g in seqs if not finals[g])
    assert open_now <= open_groups
    if grouped and open_groups == 10:
        assert sum(finals.values()) > 100  # groups end and new ones begin


def test_group_model_is_deterministic() -> None:
    w = Workload(100, 0.5, 100)
    one, two, other = GroupModel(w, 3, "p"), GroupModel(w, 3, "p"), GroupModel(w, 4, "p")
    first = [one.next() for _ in range(500)]
    assert first == [two.next() for _ in range(500)]
    assert first != [other.next() for _ in range(500)]


def test_a_transactional_input_is_done_one_offset_before_its_end() -> None:
    ends = {("t", 0): 101, ("t", 1): 0}
    assert not _done({("t", 0): 99}, ends, slack=1)
    assert _done({("t", 0): 100}, ends, slack=1)  # the commit marker at offset 100
    assert not _done({("t", 0): 100}, ends, slack=0)
    assert _done({("t", 0): 101}, ends, slack=0)


def test_messages_per_run_follow_the_byte_budget() -> None:
    spec = BenchSpec(bytes_per_run=1_000_000, min_messages=500, max_messages=5_000)
    assert spec.messages(100) == 5_000
    assert spec.messages(1_000) == 1_000
    assert spec.messages(10_000) == 500
    assert BenchSpec().key() == KEY
    reduced = BenchSpec(sizes=(100,), grouped=(0.0, 1.0), open_groups=(10,))
    assert reduced.key() in reduced.workloads()


def test_figures_and_the_ratio_come_from_the_measurements() -> None:
    r = Results(BenchSpec())
    r.throughput = [
        Throughput("raw relay (send side)", KEY, 1, 10_000, 1.0, 0.2),
        Throughput("send unit", KEY, 1, 9_000, 1.0, 0.3, redis_round_trips=36, messages_in=9_000),
        Throughput("raw relay (send side)", KEY, 2, 15_000, 1.0, 0.4),
        Throughput("send unit", KEY, 2, 13_500, 1.0, 0.6),
    ]
    r.rounds["unsaturated"] = [
        {PY_RELAY: 10_000, SEND: 9_000},
        {PY_RELAY: 10_000, SEND: 7_000},
        {PY_RELAY: 10_000, SEND: 8_000},
    ]
    r.latency = [
        Latency("raw relays chained", 4_000, 1000, 10.0, 20.0, 30.0),
        Latency("whole path", 4_000, 1000, 12.0, 30.0, 40.0),
    ]
    assert r.ratio == pytest.approx(0.8)  # the median pair, not the best one
    send = r.find("send unit", KEY)
    assert send is not None
    assert send.msg_s == 9_000
    assert send.mb_s == pytest.approx(9.0)
    assert send.cpu_s_per_million == pytest.approx(0.3 / 9_000 * 1e6)
    assert send.round_trips_per_msg == pytest.approx(0.004)
    md = table(r)
    assert "| send unit | 1 | 1 KB, 50% grouped, 10,000 open groups | 9,000 |" in md
    assert "| 0.90 |" in md  # against the raw relay of the same workload
    lines = "\n".join(summary(r))
    assert f"send unit / raw relay at {UNSATURATED.label} (unsaturated): 0.80" in lines
    assert "1.50" in lines  # whole path p99 30 ms / chained relays 20 ms
    assert "2 processes / 1 = 1.50" in lines


def test_payloads_are_incompressible_for_lz4() -> None:
    """Distinct random payloads spanning more than lz4's 64 KB window."""
    for size in (100, 1_000, 10_000):
        pool = payloads(size, seed=1)
        assert all(len(p) == size for p in pool)
        assert len(set(pool)) == len(pool)
        assert sum(len(p) for p in pool) > 64 * 1024


def test_the_ratio_line_uses_the_unsaturated_headline_and_java_is_reported_beside() -> None:
    r = Results(BenchSpec())
    r.rounds["saturated"] = [{PY_RELAY: 10_000, SEND: 5_000}] * 5
    assert r.ratio == pytest.approx(0.5)  # only the saturated one measured: that one
    r.rounds["unsaturated"] = [
        {PY_RELAY: 10_000, JAVA_RELAY: 20_000, SEND: 9_000 + i * 100} for i in range(5)
    ]
    assert r.ratio == pytest.approx(0.92)  # median of 0.90 .. 0.94
    assert r.round_ratio("unsaturated", SEND, JAVA_RELAY) == pytest.approx(0.46)
    lines = "\n".join(summary(r))
    assert "(unsaturated): 0.92 (median of 5 side-by-side pairs" in lines
    assert "send unit / Java relay at" in lines and "0.46" in lines
    assert "(saturated): 0.50" in lines
    assert BenchSpec().ratio_workload() == UNSATURATED
    assert UNSATURATED.open_groups * 4 <= 12  # well below the 12 transfer partitions
    assert UNSATURATED in BenchSpec().workloads() and KEY in BenchSpec().workloads()


def test_offered_loads_are_fixed_rates_below_the_maximum_and_fractions_of_it() -> None:
    spec = BenchSpec(latency_rates=(1_000.0, 50_000.0), latency_fractions=(0.25, 0.5))
    assert spec.offered_loads(12_000) == [1_000.0, 3_000.0, 6_000.0]
    assert spec.offered_loads(1_500) == [380.0, 750.0, 1_000.0]


def test_redis_cost_per_message_and_the_capacity_of_one_redis() -> None:
    """usec per call / messages per call, both sides added; the ceiling from server CPU."""
    r = Results(BenchSpec())
    for w, (send_us, recv_us) in {ORDINARY: (1_000, 2_000), GROUPED_ONLY: (4_000, 6_000)}.items():
        for stage, us in ((SEND, send_us), (RECEIVE, recv_us)):
            t = Throughput(stage, w, 1, 1_000, 1.0, 0.1, messages_in=1_000)
            t.redis_script_calls = 4  # 250 messages per call
            t.redis_script_us = us
            t.redis_cpu_s = us * 2 / 1e6
            r.throughput.append(t)
    costs = redis_costs(r)
    assert set(costs) == {"ordinary", "grouped"}
    grouped = costs["grouped"]
    assert grouped.script_us == pytest.approx(10.0)  # (4,000 + 6,000) us / 1,000 messages
    assert grouped.us_per_call == pytest.approx(10_000 / 8)
    assert grouped.messages_per_call == pytest.approx(250)
    assert grouped.cpu_us == pytest.approx(20.0)
    assert grouped.ceiling == pytest.approx(50_000)
    assert costs["ordinary"].script_ceiling == pytest.approx(1e6 / 3)
    assert "one Redis routes about 50,000 msg/s" in "\n".join(summary(r))
    before, after = RedisSnapshot(10, 100.0, 1.5, 1.25), RedisSnapshot(14, 350.0, 2.0, 1.5)
    assert after - before == RedisSnapshot(4, 250.0, 0.5, 0.25)
    grouped_send = r.find(SEND, GROUPED_ONLY)
    assert grouped_send is not None
    grouped_send.redis_main_cpu_s = grouped_send.redis_cpu_s / 2
    assert grouped_send.redis_main_cpu_us_per_msg == pytest.approx(
        grouped_send.redis_cpu_us_per_msg / 2
    )


def test_latency_lines_name_the_goals_and_compare_with_chained_java_relays() -> None:
    r = Results(BenchSpec())
    for rate, base in ((1_000.0, 10.0), (6_000.0, 40.0)):
        r.latency += [
            Latency(PY_CHAINED, rate, 100, base, base * 3, base * 4),
            Latency(JAVA_CHAINED, rate, 100, base / 2, base, base * 2),
            Latency(PATH, rate, 100, base * 0.75, base * 1.5, base * 5),
        ]
    lines = summary(r)
    light = next(x for x in lines if x.startswith("whole path at 1,000 msg/s"))
    assert "p50 7.5 ms" in light and "goal p50 <= 25" in light
    assert "p50 1.50, p99 1.50 (goal <= 1.5)" in light
    half = next(x for x in lines if x.startswith("whole path at 6,000 msg/s (half load)"))
    assert "goals p50 <= 50, p99 <= 200" in half
    assert any(x.startswith("whole-path p99 / chained raw relays p99: 0.50") for x in lines)


def test_every_stage_has_a_baseline_and_the_java_one() -> None:
    r = Results(BenchSpec())
    r.throughput = [
        Throughput(PY_RELAY, KEY, 1, 10_000, 1.0, 0.1),
        Throughput(JAVA_RELAY, KEY, 1, 20_000, 1.0, 0.1),
        Throughput(SEND, KEY, 1, 9_000, 1.0, 0.1),
        Throughput(PY_CHAINED, KEY, 1, 6_000, 1.0, 0.1),
        Throughput(JAVA_CHAINED, KEY, 1, 12_000, 1.0, 0.1),
        Throughput(PATH, KEY, 1, 4_800, 1.0, 0.1),
    ]
    send, path = r.throughput[2], r.throughput[5]
    assert r.baseline(send) == 10_000 and r.java_baseline(send) == 20_000
    assert r.baseline(path) == 6_000 and r.java_baseline(path) == 12_000
    md = table(r)
    assert "| 0.90 | 0.45 |" in md  # the send unit against both relays


def test_the_trace_reads_the_units_own_timings_from_their_metrics() -> None:
    text = "\n".join(
        [
            "# HELP router_batch_route_seconds deciding a batch",
            'router_batch_route_seconds_bucket{le="0.001",role="send-unit",topology="t"} 3.0',
            'router_batch_route_seconds_sum{role="send-unit",topology="t"} 0.05',
            'router_batch_route_seconds_count{role="send-unit",topology="t"} 10.0',
            'router_txn_commit_seconds_sum{role="send-unit",topology="t"} 0.2',
            'router_txn_commit_seconds_count{role="send-unit",topology="t"} 10.0',
            'router_redis_rtt_seconds_count{role="send-unit",topology="t"} 0.0',
            'router_txn_commits_total{role="send-unit",topology="t"} 10.0',
            'router_messages_in_total{role="send-unit",topology="t"} 2500.0',
        ]
    )
    means = histogram_means(text)
    assert means == {
        "batch_route_seconds": (pytest.approx(5.0), 10),
        "txn_commit_seconds": (pytest.approx(20.0), 10),
    }  # no redis_rtt: nothing observed
    assert counter(text, "messages_in") / counter(text, "txn_commits") == 250
    assert counter(text, "nothing") == 0.0


def test_tracing_off_and_on_side_by_side_give_the_cost_of_tracing() -> None:
    results = Results(BenchSpec())
    assert TRACED.traced and TRACED.label.endswith("all traced") and TRACED != UNSATURATED
    results.throughput += [
        Throughput(SEND + TRACING_OFF, TRACED, 1, 10_000, 1.0, 2.0),
        Throughput(SEND + TRACING_ON, TRACED, 1, 8_000, 1.0, 2.4),
    ]
    off, on = results.tracing_cost(SEND, TRACED) or (None, None)
    assert off is not None and on is not None and results.tracing_cost(RECEIVE, TRACED) is None
    assert TRACED_10.label.endswith("10% traced") and TRACED_10.slug.endswith("-traced10")
    line = next(x for x in summary(results) if "tracing on / off" in x)
    assert "throughput 0.80 (8,000 vs 10,000 msg/s)" in line
    assert "CPU per message 1.50 (300.0 vs 200.0 CPU s/M)" in line


class _InfoClient:
    """INFO as Redis gives it; `cpu` moves as the test says (a pure-logic fake)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.calls = 0

    def info(self, section: str) -> dict[str, object]:
        if section == "commandstats":
            return {"cmdstat_evalsha": {"calls": self.calls, "usec": self.calls * 100}}
        return {
            "used_cpu_user": self.cpu,
            "used_cpu_sys": 0.0,
            "used_cpu_user_main_thread": self.cpu * 0.9,
            "used_cpu_sys_main_thread": 0.0,
        }


def test_the_steady_part_starts_after_the_warmup_and_leaves_out_two_commits() -> None:
    """Redis's counters from the first look at `warmup` committed messages; the messages
    of the next two commits are not counted (their work may be partly before the look):
    the figure can only err high."""
    client = _InfoClient()
    steady = SteadyRedis(client, warmup=1_000)  # type: ignore[arg-type]
    for committed in (0, 500, 500):  # before the warmup: nothing
        steady.look(committed)
        client.cpu += 1.0
    assert steady.start is None
    steady.look(1_000)  # the start: cpu 3.0
    for committed in (1_000, 1_500, 2_000, 2_500, 6_000):
        client.cpu += 0.5
        steady.look(committed)
    assert steady.commits == [1_000, 1_500, 2_000]
    steady.end(6_000)
    assert steady.used is not None
    assert steady.messages == 4_000  # from the second commit after the start
    assert steady.used.cpu_s == pytest.approx(2.5)
    assert steady.used.main_cpu_s == pytest.approx(2.25)


def test_a_run_too_short_for_its_steady_part_gives_none() -> None:
    client = _InfoClient()
    steady = SteadyRedis(client, warmup=1_000)  # type: ignore[arg-type]
    steady.look(1_200)
    steady.look(1_700)
    steady.end(1_700)  # not two commits past the start: no figure rather than a wrong one
    assert steady.used is None and steady.messages == 0


def test_the_redis_stage_grouped_workload_is_filled_long_enough_for_a_steady_part() -> None:
    spec = BenchSpec()
    assert spec.messages_for(GROUPED_ONLY) == 120_000 >= 12 * GROUPED_ONLY.open_groups
    assert spec.messages_for(ORDINARY) == spec.messages(ORDINARY.size) == 40_000
    assert BenchSpec(grouped_only_messages=0).messages_for(GROUPED_ONLY) == 40_000


def test_the_grouped_line_gives_the_steady_figure_against_the_goal() -> None:
    r = Results(BenchSpec())
    for stage, steady_us in ((SEND, 2.5), (RECEIVE, 3.0)):
        t = Throughput(stage, GROUPED_ONLY, 1, 10_000, 1.0, 0.1, messages_in=10_000)
        t.redis_script_calls, t.redis_script_us, t.redis_cpu_s = 20, 40_000.0, 0.04
        t.steady_redis_messages = 5_000
        t.steady_redis_cpu_s = steady_us * 5_000 / 1e6
        r.throughput.append(t)
    line = next(x for x in summary(r) if "both sides, grouped" in x)
    assert "8.00 us of server CPU over the whole run" in line
    assert "included), 5.50 us once its 10,000 groups are open; goal <= 6" in line


def test_the_round_trips_line_says_when_batches_grow() -> None:
    for most, said in ((500, "batch size 500): "), (1_000, "batch size 500, growing to 1000")):
        r = Results(BenchSpec(), batch_size=500, max_batch_size=most)
        t = Throughput(SEND, r.spec.key(), 1, 1_000, 1.0, 0.1, redis_round_trips=2)
        t.messages_in = 1_000
        r.throughput.append(t)
        line = next(x for x in summary(r) if x.startswith("Redis round trips"))
        assert said in line and "0.0020" in line
