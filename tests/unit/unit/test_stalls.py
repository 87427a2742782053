"""Stranded partitions (router.unit.stalls): assigned, never fetched, reported once the
statistics show it long enough after the assignment."""

from __future__ import annotations

import json

from router.unit.stalls import StallGuard, fetch_states

A, B, C = ("t", 0), ("t", 1), ("u", 0)


def stats(states: dict[tuple[str, int], str]) -> str:
    topics: dict[str, dict[str, dict[str, dict[str, object]]]] = {}
    for (topic, p), state in states.items():
        parts = topics.setdefault(topic, {"partitions": {}})["partitions"]
        parts[str(p)] = {"fetch_state": state, "desired": True}
        parts["-1"] = {"fetch_state": "none", "desired": False}
    return json.dumps({"name": "c", "topics": topics})


def test_the_fetch_states_are_read_from_librdkafkas_statistics() -> None:
    doc = stats({A: "active", B: "none", C: "offset-query"})
    assert fetch_states(doc) == {A: "active", B: "none", C: "offset-query"}
    assert fetch_states("not json") == {}
    assert fetch_states("{}") == {}


def test_a_partition_never_fetched_is_stranded_only_after_the_delay() -> None:
    g = StallGuard(after_s=20.0)
    g.assigned([A, B, C], now=1.0)  # a fresh machine's clock: near zero
    g.statistics({A: "none", B: "active", C: "none"}, now=5.0)
    assert g.stranded(now=25.0) == []  # the statistics predate the delay
    g.statistics({A: "none", B: "active", C: "stopped"}, now=21.5)
    assert g.stranded(now=21.6) == [A, C]
    g.took([C])  # something of C was consumed: it fetches, whatever the statistics say
    assert g.stranded(now=22.0) == [A]


def test_assigning_again_starts_the_delay_over_and_a_revoked_one_is_forgotten() -> None:
    g = StallGuard(after_s=20.0)
    g.assigned([A, B], now=100.0)
    g.statistics({A: "none", B: "none"}, now=121.0)
    assert g.stranded(now=121.0) == [A, B]
    g.assigned([A], now=121.0)  # assigned again
    g.revoked([B])
    assert g.stranded(now=130.0) == []
    g.statistics({A: "none"}, now=141.0)
    assert g.stranded(now=141.0) == [A]
    g.statistics({A: "active"}, now=146.0)  # the fetcher started
    assert g.stranded(now=146.0) == []


def test_a_partition_the_statistics_do_not_name_is_not_stranded() -> None:
    g = StallGuard(after_s=1.0)
    g.assigned([A], now=0.0)
    g.statistics({}, now=5.0)
    assert g.stranded(now=5.0) == []
