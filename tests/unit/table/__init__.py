"""Pure tests of router.table: the rules on the model (routing, room, placement, multicast) and
the view."""
