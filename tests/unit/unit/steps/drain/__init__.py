"""Pure tests of router.unit.steps.drain: the room index, sequences, logical order, finished
groups."""
