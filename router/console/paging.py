"""The console's lists, capped and searchable: every list shows at most `limit` items from
`offset` on, of those whose guarantee ID contains the search text, with the counts to say
so ("2,000 waiting; showing the 50 oldest"). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

DEFAULT_LIMIT = 50
MAX_LIMIT = 1_000
MAX_SEARCH = 200  # characters of search text kept

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Query:
    """What the page asks for: `?q=<guarantee ID or part of one>&offset=N&limit=N`."""

    search: str = ""
    offset: int = 0
    limit: int = DEFAULT_LIMIT

    @classmethod
    def of(cls, params: Mapping[str, Sequence[str]]) -> Query:
        """From `urllib.parse.parse_qs` output; what cannot be read falls back to the
        default, and offset and limit are clamped (0 <= offset, 1 <= limit <= MAX_LIMIT)."""

        def number(name: str, default: int) -> int:
            try:
                return int(params.get(name, [""])[0])
            except ValueError:
                return default

        search = params.get("q", [""])[0].strip()[:MAX_SEARCH]
        limit = min(MAX_LIMIT, max(1, number("limit", DEFAULT_LIMIT)))
        return cls(search, max(0, number("offset", 0)), limit)


FIRST_PAGE = Query()  # no search, the first DEFAULT_LIMIT items


def matches(gid: str, search: str) -> bool:
    """Whether a guarantee ID matches the search text (a part of it, any case)."""
    return not search or search.casefold() in gid.casefold()


def capped(items: Sequence[T], gid: Callable[[T], str], q: Query) -> dict[str, Any]:
    """The items (already in the order shown) matching `q.search`, cut to the page:
    {"total": all items, "matched": those matching, "offset": first shown, "items": [...]}"""
    found = [x for x in items if matches(gid(x), q.search)] if q.search else list(items)
    return {
        "total": len(items),
        "matched": len(found),
        "offset": q.offset,
        "items": found[q.offset : q.offset + q.limit],
    }


def caption(what: str, page: Mapping[str, Any], order: str, search: str = "") -> str:
    """What a capped list says of itself: "2,000 waiting; showing the 50 oldest",
    "3 waiting; showing all", "2,000 waiting, 12 matching 'g-1'; showing all 12",
    "2,000 waiting; showing 51-100 of the oldest"."""
    total, matched, offset = page["total"], page["matched"], page["offset"]
    shown = len(page["items"])
    head = f"{total:,} {what}"
    count = total
    if search:
        head += f", {matched:,} matching {search!r}"
        count = matched
    if shown == 0:
        return head + ("; none shown" if count else "")
    if offset == 0 and shown == count:
        return f"{head}; showing all" + (f" {shown:,}" if search else "")
    if offset == 0:
        return f"{head}; showing the {shown:,} {order}"
    return f"{head}; showing {offset + 1:,}-{offset + shown:,} of the {order}"
