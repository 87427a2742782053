"""Pure tests of router.unit, mirroring its packages."""
