"""The LSO samples as the capacity rule uses them: when a final became visible bounds
when its group was released (ops.harness.verdict.visibility), and the slack is counted
from there."""

from __future__ import annotations

from ops.harness.verdict.capacity import (
    VISIBLE_BOUND_MS,
    Disturbance,
    Placed,
    judge_side,
    occupancy,
)
from ops.harness.verdict.visibility import Visibility, record_change


def test_a_record_is_visible_at_the_first_sample_whose_lso_passed_it() -> None:
    v = Visibility({"q1": ((3, 1_000), (7, 1_050), (8, 1_400))})
    assert v.at("q1", 0) == 1_000
    assert v.at("q1", 2) == 1_000
    assert v.at("q1", 3) == 1_050  # LSO 3 means offsets 0..2 are readable, not 3
    assert v.at("q1", 6) == 1_050
    assert v.at("q1", 7) == 1_400
    assert v.at("q1", 8) is None  # never seen visible (the sampler had stopped)
    assert v.at("q2", 0) is None  # a lane never sampled


def test_only_a_rising_lso_is_recorded_and_times_never_go_back() -> None:
    changes: list[tuple[int, int]] = []
    for lso, at in ((0, 10), (0, 20), (4, 30), (2, 40), (-1, 50), (5, 45), (9, 60)):
        record_change(changes, lso, at)
    # 0 first; 4 rose; 2 went back (a new leader catching up) and -1 (no answer) are not
    # changes
    assert changes == [(0, 10), (4, 30), (5, 45), (9, 60)]
    record_change(changes, 10, 55)  # an answer read with an earlier clock: kept at 60
    assert changes[-1] == (10, 60)


def rec(
    dest: str,
    offset: int,
    event: str,
    group: str | None,
    final: bool,
    at: int,
    visible: int | None = None,
) -> Placed:
    return Placed(dest, offset, event, group, final, at - 5, at, visible_ms=visible)


def test_a_release_is_due_by_its_finals_visibility_plus_the_slack() -> None:
    records = [rec("q1", 0, "a0", "A", False, 1_000), rec("q1", 1, "a1", "A", True, 2_000, 2_900)]
    occupied, held = occupancy(records, 200)
    assert occupied == [(995, 3_100)] and held == 0  # 2,900 + 200, not 2,000 + 200
    records[1] = rec("q1", 1, "a1", "A", True, 2_000)  # not sampled: from the append time
    assert occupancy(records, 200)[0] == [(995, 2_200)]


def run_with_late_commit(visible: int | None) -> tuple[int, int]:
    """q1 holds group A closed at 2,000 (its transaction seen committed at `visible`);
    q2 holds group B open throughout and, at 2,700, an ordinary message placed on q2
    inside B's span: allowed only if q1 may still have counted busy then."""
    records = [
        rec("q1", 0, "a0", "A", False, 1_000),
        rec("q1", 1, "a1", "A", True, 2_000, visible),
        rec("q2", 0, "b0", "B", False, 1_100),
        rec("q2", 1, "x", None, False, 2_700),
        rec("q2", 2, "b1", "B", True, 5_000),
    ]
    report = judge_side("receive", records, ("q1", "q2"), release_slack_ms=600)
    return report.interleaved, report.disallowed


def test_a_share_after_a_slow_commit_is_allowed_and_after_a_quick_one_is_not() -> None:
    # the final appended at 2,000, its transaction committed late (seen visible at
    # 2,500): q1's release may have come as late as 3,100, so the share at 2,700 may
    # have found every other destination busy
    assert run_with_late_commit(2_500) == (1, 0)
    # committed at once (seen visible at 2,010): released by 2,610 at the latest, and q1
    # was free when the ordinary message was placed on busy q2
    assert run_with_late_commit(2_010) == (1, 1)
    # not sampled: the slack counts from the append time, as before
    assert run_with_late_commit(None) == (1, 1)


def test_a_sampled_commit_never_shortens_an_occupancy_a_disturbance_held_up() -> None:
    """A final appended at 1,000 just before a broker restart [1,100, 5,000] (recovery
    8,000), seen visible once the broker was back (5,100): its release may still come as
    late as the restart allows (reviewed: the overlap was tested against the visibility,
    which ended the occupancy at 5,700)."""
    restart = Disturbance(1_100, 5_000, 8_000, None, "broker restart")
    first = rec("q1", 0, "a0", "A", False, 500)
    plain = occupancy([first, rec("q1", 1, "a1", "A", True, 1_000)], 600, [restart])
    seen = occupancy([first, rec("q1", 1, "a1", "A", True, 1_000, 5_100)], 600, [restart])
    assert plain == ([(495, 13_000)], 1)
    assert seen == plain


def test_an_lso_held_back_by_another_producer_excuses_no_more_than_the_bound() -> None:
    """A killed unit's open transaction holds q1's LSO for seconds: group A's final,
    committed at once, is first seen visible 10 s after its append. The slack then counts
    from the append + VISIBLE_BOUND_MS at most, so a share 4 s later, q1 long free, is
    still disallowed."""

    def run(visible: int | None) -> int:
        records = [
            rec("q1", 0, "a0", "A", False, 1_000),
            rec("q1", 2, "a1", "A", True, 2_000, visible),
            rec("q2", 0, "b0", "B", False, 1_100),
            rec("q2", 1, "x", None, False, 6_000),
            rec("q2", 2, "b1", "B", True, 9_000),
        ]
        return judge_side("send", records, ("q1", "q2"), release_slack_ms=600).disallowed

    assert run(None) == run(2_010) == run(12_000) == 1
    assert occupancy([rec("q1", 0, "a", "A", True, 2_000, 12_000)], 600)[0] == [
        (1_995, 2_000 + VISIBLE_BOUND_MS + 600)
    ]
