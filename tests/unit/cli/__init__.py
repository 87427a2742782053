"""Pure tests of router.cli, and of the deployment files (docker-compose.yml, Dockerfile)
against it."""
