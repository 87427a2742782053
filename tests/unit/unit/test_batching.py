"""Batches that grow with the backlog and shrink at a light load (router.unit.batching)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from router.unit.batching import BatchSizer


def test_full_batches_double_the_next_up_to_the_most_then_light_ones_halve_it_back() -> None:
    s = BatchSizer(500, 2000)
    seen = []
    for _ in range(4):
        s.after(s.target)  # a full batch: a backlog
        seen.append(s.target)
    assert seen == [1000, 2000, 2000, 2000]
    s.after(1500)  # not full, more than a quarter: stays
    assert s.target == 2000
    for _ in range(3):
        s.after(10)  # the backlog is gone
        seen.append(s.target)
    assert seen[-3:] == [1000, 500, 500]


def test_a_most_below_the_base_means_batches_never_grow() -> None:
    s = BatchSizer(500, 100)
    s.after(500)
    assert s.target == 500


@given(st.integers(1, 5000), st.integers(1, 20000), st.lists(st.integers(0, 30000)))
def test_the_target_stays_within_its_bounds_whatever_the_batches(
    base: int, most: int, taken: list[int]
) -> None:
    s = BatchSizer(base, most)
    for n in taken:
        s.after(min(n, s.target))  # a poll never takes more than the target
        assert base <= s.target <= max(base, most)


def test_a_unit_holding_several_cells_grows_its_batches_per_cell() -> None:
    """Each cell's share of a batch is one route call on that cell's table: with three
    cells a batch may hold three times as many, so each call carries what one cell's would."""
    s = BatchSizer(500, 1000)
    s.spread(3)
    for _ in range(4):
        s.after(s.target)
    assert s.target == 3000
    s.spread(1)  # partitions of the other cells revoked: back under the one-cell bound
    assert s.target == 1000 and s.most == 1000
    s.spread(0)  # nothing held: as one cell
    assert s.most == 1000
