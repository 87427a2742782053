"""Pure tests of ops.harness.stack (no servers started)."""
