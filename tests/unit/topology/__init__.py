"""Pure tests of router.topology: topics and their replication."""
