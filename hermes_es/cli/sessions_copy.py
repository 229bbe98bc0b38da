"""``hermes sessions copy-store SOURCE TARGET``: move a store between SQLite and PostgreSQL."""

from __future__ import annotations

import sys

import click

from hermes_es.cli.base import echo_json
from hermes_es.cli.progress import progress_bar


@click.command("copy-store")
@click.argument("source")
@click.argument("target")
@click.option("--verify", "check", is_flag=True, help="Verify the target's projections after.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option(
    "--bulk",
    is_flag=True,
    help="Into an empty PostgreSQL store: one transaction with COPY, indexes built once"
    " (fast for big stores; a killed bulk copy leaves the target empty, start it again).",
)
def copy_store_cmd(
    source: str, target: str, check: bool, as_json: bool, quiet: bool, bulk: bool
) -> None:
    """Copy every event of SOURCE into TARGET, in log order, building TARGET's projections.

    SOURCE and TARGET are state.db paths or postgresql:// URLs. TARGET must be empty, or hold
    an interrupted copy of SOURCE: running the command again resumes it. Exits 1 when the
    event digests of the two stores differ (or, with --verify, the target does not verify).

    Example: hermes sessions copy-store ~/.hermes/state.db postgresql://hermes@db/hermes
    """
    from hermes_es.commands.copy_store import copy_store
    from hermes_es.store.backend import open_backend

    src, dst = open_backend(source), open_backend(target)
    with progress_bar("copying", enabled=not quiet and sys.stderr.isatty()) as update:
        done = copy_store(src, dst, progress=update, bulk=bulk)
    bad: list[str] = []
    if check:
        bad = [d.table for d in dst.verify() if not d.equal]
    same = done.digest == done.target_digest
    if as_json:
        echo_json({**_plain(done), "digests_equal": same, "verify_failed": bad})
    else:
        click.echo(
            f"copied {done.copied} events ({done.events} in all) from {done.source} to"
            f" {done.target}"
        )
        click.echo(f"source digest {done.digest}")
        click.echo(f"target digest {done.target_digest}" + ("" if same else "  DIFFERENT"))
        if check:
            click.echo("target verified" if not bad else f"target differs in {', '.join(bad)}")
    if not same or bad:
        sys.exit(1)


def _plain(done: object) -> dict[str, object]:
    import msgspec

    out: dict[str, object] = msgspec.to_builtins(done)
    return out
