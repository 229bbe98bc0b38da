"""``hermes doctor``: a readable health report of the profile's store and config."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hermes_es.cli.base import echo_json, get_hermes, when

if TYPE_CHECKING:
    from hermes_es.commands.doctor import DoctorReport
    from hermes_es.store.scrub import PendingScrub

SCHEMA_DOC = "docs/schema.md"


def schema_doc() -> str:
    """Where docs/schema.md (tables, columns, events, plain-sqlite3 search) is: the file in a
    source checkout, else its path in the hermes_es source tree."""
    path = Path(__file__).resolve().parents[2] / SCHEMA_DOC
    return str(path) if path.is_file() else f"{SCHEMA_DOC} in the hermes_es source tree"


_STYLE = {
    "ok": ("ok", "green"),
    "info": ("info", "cyan"),
    "warning": ("WARN", "yellow"),
    "error": ("FAIL", "bold red"),
    "skipped": ("skip", "dim"),
}


@click.command("doctor")
@click.option("--full", is_flag=True, help="Also run integrity_check and replay the whole log.")
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too, not only on errors.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.pass_context
def doctor_cmd(ctx: click.Context, full: bool, strict: bool, as_json: bool) -> None:
    """Check the profile's state.db (integrity, projections vs the log, search index, WAL size,
    live holders, stored prompts) and its config.yaml (unknown keys, legacy session-reset
    settings), and say how to fix each problem.

    Exits 1 when something is wrong (an error); warnings alone exit 0 unless --strict.

    Example: hermes doctor --full
    """
    from hermes_es.commands.doctor import run_doctor

    hermes = get_hermes(ctx)
    if hermes.backend.kind != "sqlite":
        _doctor_server(ctx, full, strict, as_json)
        return
    report = run_doctor(hermes.dir, os.environ, full=full)
    code = report.exit_code(strict=strict)
    if as_json:
        echo_json(
            {
                "ok": code == 0,
                "errors": report.errors,
                "warnings": report.warnings,
                "profile_dir": report.profile_dir,
                "db_path": report.db_path,
                "config_path": report.config_path,
                "findings": report.findings,
                "schema_doc": schema_doc(),
            }
        )
    else:
        _print_report(report)
    if code:
        ctx.exit(code)


def _print_report(report: DoctorReport) -> None:
    """The findings as a list, each problem followed by its fix, then a verdict line."""
    from rich.console import Console
    from rich.markup import escape as escape_markup

    from hermes_es.terminal_text import clean

    def escape(text: str) -> str:
        """Stored text (paths, titles, holder commands) shown as it is: no control
        characters, no rich markup."""
        return escape_markup(clean(text))

    console = Console(
        highlight=False, emoji=False, soft_wrap=True, force_terminal=sys.stdout.isatty()
    )
    console.print(f"[bold]hermes doctor[/] {escape(report.profile_dir)}")
    for finding in report.findings:
        label, style = _STYLE[finding.level]
        check, message = escape(finding.check), escape(finding.message)
        console.print(f"  [{style}]{label:<4}[/] {check:<20} {message}")
        if finding.fix:
            console.print(f"       {'':<20} [dim]fix:[/] {escape(finding.fix)}")
    if report.errors:
        console.print(
            f"[bold red]{report.errors} problem(s)[/] and {report.warnings} warning(s) found"
        )
    elif report.warnings:
        console.print(f"[yellow]no problems; {report.warnings} warning(s)[/]")
    elif any(f.check == "store.events" and f.level == "info" for f in report.findings):
        console.print(
            "[green]no problems found[/] in what was checked; older events were not decoded"
            " ('hermes doctor --full' checks them all)"
        )
    else:
        console.print("[green]everything looks healthy[/]")
    console.print(f"[dim]state.db tables, columns and events: {escape(schema_doc())}[/]")


def _doctor_server(ctx: click.Context, full: bool, strict: bool, as_json: bool) -> None:
    """A server store: is it there, and (with --full) do its projections match the log.

    The state.db checks (integrity_check, WAL size, holders of the file) do not apply to a
    PostgreSQL database; the server's own monitoring covers its health.
    """
    backend = get_hermes(ctx).backend
    findings: list[dict[str, str]] = []
    if backend.exists():
        findings.append({"level": "ok", "check": "store", "message": f"{backend.location}"})
        if full:
            bad = [d.table for d in backend.verify() if not d.equal]
            findings.append(
                {
                    "level": "error",
                    "check": "projections",
                    "message": "differ from the log in "
                    + ", ".join(bad)
                    + "; fix: hermes sessions rebuild-projections",
                }
                if bad
                else {"level": "ok", "check": "projections", "message": "match the log"}
            )
        findings.append(_server_scrub(backend.pending_scrub()))
    else:
        findings.append(
            {
                "level": "info",
                "check": "store",
                "message": f"no store yet at {backend.location}; it is created by the first"
                " session",
            }
        )
    failing = ("error", "warning") if strict else ("error",)
    failed = any(f["level"] in failing for f in findings)
    if as_json:
        echo_json({"ok": not failed, "store": backend.location, "findings": findings})
    else:
        from hermes_es.terminal_text import clean

        click.echo(f"hermes doctor {clean(backend.location)}")
        for f in findings:
            mark = _STYLE.get(f["level"], (f["level"], ""))[0]
            click.echo(f"  {mark:<5} {f['check']:<20} {clean(f['message'])}")
        warned = any(f["level"] == "warning" for f in findings)
        click.echo(
            "something is wrong"
            if failed
            else "no problems; a warning"
            if warned
            else "everything looks healthy"
        )
    if failed:
        ctx.exit(1)


def _server_scrub(entry: PendingScrub | None) -> dict[str, str]:
    """The ``store.scrub`` finding of a server store: a delete whose table rewrite was blocked."""
    if entry is None:
        return {"level": "ok", "check": "store.scrub",
                "message": "no deleted text is waiting to be scrubbed"}  # fmt: skip
    since = when(entry.since) if entry.since else "an unknown time"
    return {
        "level": "warning",
        "check": "store.scrub",
        "message": f"a {entry.reason} at {since} is not yet scrubbed: another connection held"
        " a lock on the tables it rewrites, so the deleted text stays in their files;"
        " fix: hermes sessions optimize (or the next delete) rewrites them",
    }
