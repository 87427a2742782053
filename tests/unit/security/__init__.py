"""Pure tests of router.security: ACL plans and security settings (also run by `make test-
secure`)."""
