"""Pure tests of ops/harness (mirroring its packages) and of what the drivers print."""
