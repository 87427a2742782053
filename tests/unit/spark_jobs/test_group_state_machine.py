"""The Spark receiver's per-group state machine (pure logic, no Spark)."""

from __future__ import annotations

import base64

import pytest

from spark_jobs import domain
from spark_jobs.groups import (
    DUPLICATE,
    GROUP,
    RECORD,
    VIOLATION,
    Message,
    Outcome,
    State,
    expire,
    ordinary,
    step,
)


def msg(
    record_id: str, seq: int = 0, *, final: bool = False, offset: int = 0, queue: str = "q1"
) -> Message:
    return Message(
        record_id, "schema", queue, 0, offset, seq, final, 1_000 + seq, record_id.encode()
    )


def kinds(outcomes: list[Outcome]) -> list[tuple[str, str | None]]:
    return [(o.output, o.message.record_id if o.message else None) for o in outcomes]


def test_an_ordinary_message_is_a_record() -> None:
    """Its copies are dropped by Spark before (`api.complete_groups`)."""
    assert kinds([ordinary(msg("u1", offset=3))]) == [(RECORD, "u1")]


def test_group_in_sequence_is_complete_across_calls_and_in_offset_order() -> None:
    state, out = step("po/1", None, [msg("o/1", 1, offset=11), msg("o/0", 0, offset=10)])
    assert out == []
    assert [m.seq for m in state.members] == [0, 1]
    state, out = step("po/1", state, [msg("o/2", 2, final=True, offset=12)])
    assert [o.output for o in out] == [GROUP]
    assert [m.record_id for m in out[0].members] == ["o/0", "o/1", "o/2"]
    assert state.status == "done"


def test_copies_of_a_groups_messages_are_duplicates_not_violations() -> None:
    state, out = step("po/1", None, [msg("o/0", 0, offset=1), msg("o/0", 0, offset=2)])
    assert kinds(out) == [(DUPLICATE, "o/0")]
    state, out = step("po/1", state, [msg("o/1", 1, final=True, offset=3)])
    assert [o.output for o in out] == [GROUP]
    state, out = step("po/1", state, [msg("o/1", 1, final=True, offset=40)])
    assert kinds(out) == [(DUPLICATE, "o/1")]
    # A re-sent finished group may be routed anew, to another queue: still copies.
    _, out = step("po/1", state, [msg("o/0", 0, queue="q9"), msg("o/1", 1, final=True, queue="q9")])
    assert kinds(out) == [(DUPLICATE, "o/0"), (DUPLICATE, "o/1")]


def test_a_message_on_a_second_queue_breaks_the_group_and_reports_every_member() -> None:
    state, _ = step("po/1", None, [msg("o/0", 0, queue="q1")])
    state, out = step("po/1", state, [msg("o/1", 1, queue="q2")])
    assert kinds(out) == [(VIOLATION, "o/0"), (VIOLATION, "o/1")]
    assert out[1].reason is not None and out[1].reason.startswith("split")
    assert state.status == "broken"
    _, out = step("po/1", state, [msg("o/2", 2, final=True, queue="q1")])
    assert kinds(out) == [(VIOLATION, "o/2")]
    assert out[0].reason is not None and "broken group" in out[0].reason


def test_a_split_within_one_batch_is_a_split_whatever_the_queue_names() -> None:
    for home, other in (("q1", "q2"), ("q2", "q1")):
        state, out = step("po/1", None, [msg("o/1", 1, queue=other), msg("o/0", 0, queue=home)])
        assert kinds(out) == [(VIOLATION, "o/0"), (VIOLATION, "o/1")]
        assert out[1].reason is not None and out[1].reason.startswith("split")
        assert state.queue == home


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ([msg("o/0", 0, offset=1), msg("o/2", 2, offset=2)], "order"),
        ([msg("o/1", 1, offset=1)], "order"),
        ([msg("o/0", 0, offset=1), msg("x/0", 0, offset=2)], "conflict"),
    ],
)
def test_gaps_reversals_and_conflicts_are_violations(messages: list[Message], reason: str) -> None:
    state, out = step("po/1", None, messages)
    assert state.status == "broken"
    assert {o.output for o in out} == {VIOLATION}
    assert len(out) == len(messages)
    assert out[-1].reason is not None and out[-1].reason.startswith(reason)


def test_a_new_message_after_the_final_is_a_violation() -> None:
    state, _ = step("po/1", None, [msg("o/0", 0, final=True)])
    _, out = step("po/1", state, [msg("o/1", 1, offset=5)])
    assert kinds(out) == [(VIOLATION, "o/1")]


def test_an_open_group_that_times_out_is_reported_incomplete() -> None:
    state, _ = step("po/1", None, [msg("o/0", 0), msg("o/1", 1, offset=1)])
    out = expire(state, 3_000)
    assert kinds(out) == [(VIOLATION, "o/0"), (VIOLATION, "o/1")]
    assert out[0].reason is not None and out[0].reason.startswith("incomplete")
    done, _ = step("po/2", None, [msg("p/0", 0, final=True)])
    assert expire(done, 3_000) == []


def test_state_round_trips_through_its_stored_form() -> None:
    state, _ = step("doc/1", None, [msg("d/0", 0, offset=7), msg("d/1", 1, offset=8)])
    again = State.from_stored(*state.stored())
    assert again == state
    assert [m.value for m in again.members] == [b"d/0", b"d/1"]


def test_expected_messages_follow_the_business_keys() -> None:
    order = {"type": "purchase_order", "order_id": "A", "lines": [{}, {}, {}]}
    assert [(s.record_id, s.group, s.seq, s.final) for s in domain.expected_messages(order, 4)] == [
        ("A/0", "po/A", 0, False),
        ("A/1", "po/A", 1, False),
        ("A/2", "po/A", 2, True),
    ]
    # A document is one ordinary message, however many segments it travels in.
    doc = {"type": "document", "document_id": "D", "content_base64": base64.b64encode(b"x" * 9)}
    assert [tuple(s) for s in domain.expected_messages(doc, 4)] == [("D", None, 0, False)]
    update = {"type": "stock_update", "update_id": "U"}
    assert [(s.record_id, s.group) for s in domain.expected_messages(update, 4)] == [("U", None)]
