"""The Sender and Receiver client libraries against the real broker, Redis and unit processes."""
