"""Redis: the one way the router builds a Redis client, by URL or through Sentinel
(`client`)."""
