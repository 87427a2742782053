"""Pure tests of router.sender, and of the client libraries' documentation."""
