"""Integration tests of router.backends against the real broker (EndOffsets)."""
