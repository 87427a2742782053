"""Pure tests of router.table.store.management.store: the entry codec."""
