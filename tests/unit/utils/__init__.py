"""Pure tests of router.utils."""
