"""Command-line interface: thin click commands over commands/ and queries/."""

from __future__ import annotations


def main() -> None:
    """Console-script entry point."""
    from hermes_es.cli.app import cli

    cli(prog_name="hermes")
