"""The console's capped and searchable lists (`router.console.paging`)."""

from __future__ import annotations

from router.console.paging import MAX_LIMIT, Query, capped, caption, matches


def test_the_query_is_read_from_the_url_and_clamped() -> None:
    assert Query.of({}) == Query("", 0, 50)
    assert Query.of({"q": [" g-1 "], "offset": ["100"], "limit": ["200"]}) == Query("g-1", 100, 200)
    assert Query.of({"limit": ["0"], "offset": ["-5"]}) == Query("", 0, 1)
    assert Query.of({"limit": ["99999"]}).limit == MAX_LIMIT
    assert Query.of({"limit": ["many"], "offset": ["x"]}) == Query()


def test_search_matches_part_of_an_id_in_any_case() -> None:
    assert matches("Order-42", "der-4") and matches("Order-42", "ORDER") and matches("x", "")
    assert not matches("Order-42", "43")


def test_capped_lists_say_how_many_there_are_and_which_are_shown() -> None:
    gids = [f"g-{i}" for i in range(2_000)]
    page = capped(gids, str, Query())
    assert page == {"total": 2_000, "matched": 2_000, "offset": 0, "items": gids[:50]}
    assert caption("waiting", page, "oldest") == "2,000 waiting; showing the 50 oldest"
    later = capped(gids, str, Query(offset=50, limit=50))
    assert later["items"] == gids[50:100]
    assert caption("waiting", later, "oldest") == "2,000 waiting; showing 51-100 of the oldest"
    few = capped(gids[:3], str, Query())
    assert caption("waiting", few, "oldest") == "3 waiting; showing all"
    found = capped(gids, str, Query("g-199"))
    assert found["matched"] == 11 and found["items"][0] == "g-199"
    assert caption("waiting", found, "oldest", "g-199") == (
        "2,000 waiting, 11 matching 'g-199'; showing all 11"
    )
    none = capped(gids, str, Query("nope"))
    assert caption("waiting", none, "oldest", "nope") == "2,000 waiting, 0 matching 'nope'"
    assert caption("waiting", capped([], str, Query()), "oldest") == "0 waiting"
