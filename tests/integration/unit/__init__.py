"""Units in process and as processes on the real broker and Redis: the run loop's sequences,
leases and sessions, and each guarantee end to end (`*_through_units`: the same behaviour as
a unit-test suite, through real unit processes)."""
