"""``hermes sessions rebuild-projections`` and ``hermes sessions verify``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from hermes_es.cli.base import echo_json, get_hermes
from hermes_es.cli.progress import progress_bar
from hermes_es.errors import SessionNotFoundError
from hermes_es.terminal_text import echo

if TYPE_CHECKING:
    from hermes_es.store.backend import StoreBackend


def _existing_store(ctx: click.Context) -> StoreBackend:
    """The invocation's store; a store that does not exist yet is an error (exit 1)."""
    backend = get_hermes(ctx).backend
    if not backend.exists():
        raise SessionNotFoundError(f"no store at {backend.location}", subject=backend.location)
    return backend


@click.command("rebuild-projections")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.pass_context
def rebuild_cmd(ctx: click.Context, quiet: bool) -> None:
    """Replay the whole event log into fresh projection tables and swap them in atomically.

    Example: hermes sessions rebuild-projections
    """
    backend = _existing_store(ctx)
    with progress_bar("rebuilding", enabled=not quiet and sys.stderr.isatty()) as update:
        count = backend.rebuild(progress=update)
    echo(f"rebuilt projections from {count} events")


@click.command("verify")
@click.option("--json", "as_json", is_flag=True, help="Print the per-table summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.pass_context
def verify_cmd(ctx: click.Context, as_json: bool, quiet: bool) -> None:
    """Rebuild into a scratch database and compare every projection table with the live one.

    Exits 1 with a per-table summary when anything differs.

    Example: hermes sessions verify --json
    """
    backend = _existing_store(ctx)
    with progress_bar("verifying", enabled=not quiet and sys.stderr.isatty()) as update:
        diffs = backend.verify(progress=update)
    bad = [d for d in diffs if not d.equal]
    if as_json:
        echo_json({"ok": not bad, "tables": diffs})
    else:
        for d in diffs:
            mark = "ok  " if d.equal else "DIFF"
            echo(f"{mark} {d.table:<22} live={d.live_rows:<8} rebuilt={d.rebuilt_rows}")
        echo("projections match the log" if not bad else f"{len(bad)} table(s) differ from the log")
    if bad:
        ctx.exit(1)
