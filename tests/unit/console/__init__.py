"""Pure tests of router.console: the status page's data."""
