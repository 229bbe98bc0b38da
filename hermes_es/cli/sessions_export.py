"""``hermes sessions export`` and ``hermes sessions import`` (backups and Hermes migration)."""

from __future__ import annotations

import datetime as dt
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hermes_es.cli.base import echo_json, get_hermes, warn_unscrubbed
from hermes_es.cli.progress import progress_bar
from hermes_es.errors import UsageError
from hermes_es.terminal_text import echo

if TYPE_CHECKING:
    from hermes_es.commands.export import ExportedFile, ExportOptions

FORMAT_CHOICES = ("jsonl", "json", "md", "qmd", "html")
_RELATIVE = re.compile(r"(\d+)([smhdw])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_when(text: str, *, option: str, now: float | None = None) -> float:
    """Unix seconds from ``2025-03-05``, an ISO date-time, epoch seconds, or ``7d``/``12h`` ago."""
    raw = text.strip()
    m = _RELATIVE.fullmatch(raw)
    if m:
        return (now if now is not None else time.time()) - int(m.group(1)) * _UNITS[m.group(2)]
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        return dt.datetime.fromisoformat(raw).timestamp()
    except ValueError:
        raise UsageError(
            f"{option} {text!r}: use a date (2025-03-05), a date-time (2025-03-05T09:15), "
            "epoch seconds, or an age like 7d / 12h"
        ) from None


def _show_progress(enabled: bool | None) -> bool:
    return sys.stderr.isatty() if enabled is None else enabled


@click.command("export")
@click.argument("output", required=False, type=click.Path(path_type=Path))
@click.option(
    "--format", "fmt", type=click.Choice(FORMAT_CHOICES), default="jsonl", show_default=True,
    help="jsonl/json: backup of every stored row; md/qmd/html: the history the session shows.",
)  # fmt: skip
@click.option("--session-id", "session_refs", multiple=True, help="Session id, prefix or title.")
@click.option("--source", "sources", multiple=True, help="Only sessions of this source tag.")
@click.option("--since", default=None, help="Started at or after (2025-03-05, 7d, epoch).")
@click.option("--until", default=None, help="Started before (2025-03-05, 7d, epoch).")
@click.option("--title", default=None, help="Title contains this text (case-insensitive).")
@click.option(
    "--workspace", type=click.Path(path_type=Path), default=None, help="Sessions of this workspace."
)
@click.option("--pinned", is_flag=True, help="Only pinned sessions.")
@click.option("--archived", is_flag=True, help="Only archived sessions.")
@click.option("--only", type=click.Choice(["user-prompts"]), default=None, help="md/jsonl only.")
@click.option("--redact", is_flag=True, help="Scrub API keys, tokens and passwords first.")
@click.option(
    "--delete-after-verified", is_flag=True,
    help="With --session-id and --yes: delete the session (and delegates) after verifying.",
)  # fmt: skip
@click.option("--yes", is_flag=True, help="Confirm --delete-after-verified.")
@click.option("--force", is_flag=True, help="Overwrite existing files in OUTPUT.")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest lines as JSON.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a TTY).")
@click.pass_context
def export_cmd(
    ctx: click.Context,
    output: Path | None,
    fmt: str,
    session_refs: tuple[str, ...],
    sources: tuple[str, ...],
    since: str | None,
    until: str | None,
    title: str | None,
    workspace: Path | None,
    pinned: bool,
    archived: bool,
    only: str | None,
    redact: bool,
    delete_after_verified: bool,
    yes: bool,
    force: bool,
    as_json: bool,
    progress: bool | None,
) -> None:
    """Export sessions into the directory OUTPUT (default ./hermes-export): one file per
    session plus manifest.jsonl (file, message count, lineage ids, SHA-256, display version).

    Without --session-id at least one filter is required; filtered exports include pinned,
    archived and hidden sessions. JSON/JSONL files are backups of every stored row (restore
    them with 'hermes sessions import'); md, qmd and html hold the history the session shows.

    Example: hermes sessions export ./backup --format md --source cli --since 30d --redact
    """
    from hermes_es.commands.export import ExportOptions, check_options, max_export_messages
    from hermes_es.export.select import ExportFilter
    from hermes_es.workspace import workspace_key

    hermes = get_hermes(ctx)
    filters = ExportFilter(
        sources=sources,
        since=parse_when(since, option="--since") if since else None,
        until=parse_when(until, option="--until") if until else None,
        title=title,
        workspace=workspace_key(workspace) if workspace else None,
        pinned=pinned,
        archived=archived,
    )
    if session_refs and not filters.is_empty():
        raise UsageError("give either --session-id or filters, not both")
    if not session_refs and filters.is_empty():
        raise UsageError(
            "a bare bulk export is refused: pass --session-id or at least one filter "
            "(--source, --since, --until, --title, --workspace, --pinned, --archived)"
        )
    if delete_after_verified and (len(session_refs) != 1 or not yes):
        raise UsageError("--delete-after-verified needs exactly one --session-id and --yes")
    opts = ExportOptions(
        fmt=fmt,
        only=only,
        redact=redact,
        force=force,
        max_messages=max_export_messages(hermes.config().config),
    )
    check_options(opts)
    target = output or Path("hermes-export")
    if delete_after_verified:
        from hermes_es.commands.export import check_delete_basis

        check_delete_basis(opts)
        _export_and_delete(ctx, target, session_refs[0], opts, as_json, progress)
        return
    from hermes_es.commands.export import export_sessions
    from hermes_es.export.select import select_sessions
    from hermes_es.queries.resolve import resolve_session

    conn = hermes.reader()
    if session_refs:
        ids = list(dict.fromkeys(resolve_session(conn, ref) for ref in session_refs))
    else:
        ids = select_sessions(conn, filters)
        if not ids:
            echo("No sessions match these filters; nothing was written.", err=True)
            return
    with progress_bar("Exporting", enabled=_show_progress(progress)) as tick:
        files = export_sessions(conn, target, ids, opts, progress=tick)
    _report(files, target, as_json)


def _export_and_delete(
    ctx: click.Context,
    target: Path,
    ref: str,
    opts: ExportOptions,
    as_json: bool,
    progress: bool | None,
) -> None:
    from hermes_es.cli.base import actor_name
    from hermes_es.commands.export import export_then_delete

    engine = get_hermes(ctx).engine()
    sid = engine.resolve(ref)
    with progress_bar("Exporting", enabled=_show_progress(progress)) as tick:
        done = export_then_delete(engine, target, sid, opts, actor=actor_name(), progress=tick)
    _report(done.files, target, as_json)
    if not as_json:
        echo(f"Verified and deleted {len(done.deleted)} session(s): {', '.join(done.deleted)}")
    warn_unscrubbed(done.scrubbed, get_hermes(ctx))


def _report(files: list[ExportedFile], target: Path, as_json: bool) -> None:
    if as_json:
        echo_json(files)
        return
    for f in files:
        echo(f"{target / f.file}  {f.messages} messages  sha256 {f.sha256[:16]}…")
    echo(f"Wrote {len(files)} file(s) and {target / 'manifest.jsonl'}")


@click.command("import")
@click.argument("files", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--from-hermes-db", "hermes_db", type=click.Path(path_type=Path), default=None,
    help="Migrate every session of a Hermes Agent state.db (read-only).",
)  # fmt: skip
@click.option(
    "--on-conflict", type=click.Choice(["refuse", "skip"]), default=None,
    help="A session that exists with different content, a clashing title: refuse the whole "
    "import (default) or skip that session and report it.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a TTY).")
@click.pass_context
def import_cmd(
    ctx: click.Context,
    files: tuple[Path, ...],
    hermes_db: Path | None,
    on_conflict: str | None,
    as_json: bool,
    progress: bool | None,
) -> None:
    """Restore JSON/JSONL backups (files or export directories) as archived history, all or
    nothing; or migrate a Hermes Agent state.db with --from-hermes-db PATH.

    A session already present with the same content, and a line identical to an earlier one,
    are read once. A conflict refuses everything unless --on-conflict skip.

    Example: hermes sessions import ./backup/20250305_091523_a1b2c3.jsonl
    """
    if bool(files) == bool(hermes_db):
        raise UsageError("give backup FILES or --from-hermes-db PATH (exactly one of them)")
    if hermes_db is not None and on_conflict is not None:
        raise UsageError("--on-conflict applies to backup FILES, not --from-hermes-db")
    hermes = get_hermes(ctx)
    from hermes_es.cli.base import actor_name
    from hermes_es.commands.importing import max_import_messages

    cap = max_import_messages(hermes.config().config)
    engine = hermes.engine()
    if hermes_db is not None:
        from hermes_es.commands.migrate_hermes import import_hermes_db

        with progress_bar("Migrating", enabled=_show_progress(progress)) as tick:
            report = import_hermes_db(
                engine.store, hermes_db, max_messages=cap, actor=actor_name(), progress=tick
            )
        if as_json:
            echo_json(report)
            _fail_over_cap(report.over_cap, cap)
            return
        counts = report.source_counts
        if counts is not None:
            echo(
                f"Source: {counts.sessions} sessions, {counts.messages} messages "
                f"({counts.live_messages} live, {counts.compacted_messages} compacted, "
                f"{counts.rewound_messages} rewound)"
            )
        echo(
            f"Imported {report.imported_sessions} sessions, {report.imported_messages} messages; "
            f"{len(report.updated_sessions)} brought up to date; "
            f"{len(report.already_present)} already present"
        )
        for line in report.skipped:
            echo(f"skipped: {line}")
        _fail_over_cap(report.over_cap, cap)
        return
    from hermes_es.commands.importing import import_backups

    with progress_bar("Importing", enabled=_show_progress(progress)) as tick:
        result = import_backups(
            engine.store,
            files,
            max_messages=cap,
            actor=actor_name(),
            progress=tick,
            on_conflict="skip" if on_conflict == "skip" else "refuse",
        )
    if as_json:
        echo_json(result)
        return
    echo(
        f"Imported {len(result.imported)} sessions ({result.messages} messages) as archived "
        f"history; {len(result.skipped)} already present with the same content"
    )
    if result.duplicates:
        click.echo(f"{len(result.duplicates)} identical duplicate line(s) read once")
    for c in result.conflicts:
        line = f"skipped (conflict): {c.where}: session {c.session_id}: {c.reason}"
        click.echo(_CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", line))


def _fail_over_cap(over_cap: list[str], cap: int) -> None:
    """Exit 1 naming the sessions a migration left out for exceeding the import cap."""
    if over_cap:
        from hermes_es.errors import GuardError

        raise GuardError(
            f"{len(over_cap)} session(s) exceed sessions.max_import_messages = {cap} and were "
            f"not imported: {', '.join(over_cap)} (raise the cap, or set it to 0, and run the "
            "migration again)",
            subject=over_cap[0],
        )
