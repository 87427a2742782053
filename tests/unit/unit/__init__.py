"""Pure tests of router.unit.loop, mirroring its packages."""
