"""Pure tests of what the drivers (ops/*.py) print: ops.harness.console."""
