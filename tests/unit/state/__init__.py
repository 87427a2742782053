"""Pure tests of router.state: resumed groups and group statuses."""
