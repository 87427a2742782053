"""Pure tests of router.table.store: the entry codec."""
