"""Pure tests of router.cli.main, and of the deployment files (docker-compose.yml, Dockerfile)
against it."""
