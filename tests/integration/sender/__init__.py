"""The sender library against the real broker and Redis: its journal of open groups, groups
resumed after a crash."""
