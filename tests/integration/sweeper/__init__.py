"""The sweeper and its horizon against the real broker and Redis."""
