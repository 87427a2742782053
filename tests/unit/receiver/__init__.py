"""Pure tests of router.receiver (fake consumers, no broker)."""
