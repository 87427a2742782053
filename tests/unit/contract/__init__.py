"""Pure tests of router.contract: headers, lifetime, priority bands, segments."""
