"""The `router` console script: thin click commands over the library (`main`, with `table`,
`acls` and `spark` beside it). `router.cli:main` is the entry point."""

from router.cli.main import cli, main

__all__ = ["cli", "main"]
