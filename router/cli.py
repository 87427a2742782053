"""The `router` console script: a thin click layer over library functions."""

from __future__ import annotations

import click

from router import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="router")
def cli() -> None:
    """Order-guaranteeing routing layer on Kafka."""


def main() -> None:
    cli()
