"""Pure tests of router.unit.commit."""
