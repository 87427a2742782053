"""Operator tools run from a checkout: the demo, chaos and benchmark drivers and the
harness they share with the tests (`ops.harness`). Not shipped in the wheel: the
production `router` command never imports any of it."""
