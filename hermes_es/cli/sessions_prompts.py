"""``hermes sessions refresh-prompts`` and ``hermes sessions repair-prompts``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from hermes_es.cli.base import Hermes, echo_json, get_hermes
from hermes_es.terminal_text import echo

if TYPE_CHECKING:
    from hermes_es.commands.prompts_admin import RepairReport, RepairRow


def _hermes_for(ctx: click.Context, profile: str | None) -> Hermes:
    """The invocation's Hermes; a ``-p`` given on the subcommand wins over the root one."""
    if profile is None:
        return get_hermes(ctx)
    root = ctx.find_root()
    if isinstance(root.obj, Hermes):
        root.obj.close()
    hermes = Hermes.from_env(profile, (root.params or {}).get("store"))
    root.obj = hermes
    root.call_on_close(hermes.close)
    return hermes


@click.command("refresh-prompts")
@click.option("--session", "session_ref", default=None, help="Only this session (id or prefix).")
@click.option("-p", "--profile", default=None, help="Profile whose sessions to refresh.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def refresh_prompts_cmd(
    ctx: click.Context, session_ref: str | None, profile: str | None, as_json: bool
) -> None:
    """Ask sessions to rebuild their system prompt from the profile's current sources
    (SOUL.md, skills, project context files, memory) on their next turn.

    History, session id and tools stay as they were; later turns reuse the rebuilt prompt.
    Prints how many sessions hold a stored prompt.

    Example: hermes sessions refresh-prompts --session 20250305_091523_a1b2c3
    """
    hermes = _hermes_for(ctx, profile)
    if not hermes.backend.exists():
        if session_ref is not None:
            from hermes_es.errors import SessionNotFoundError

            raise SessionNotFoundError(
                f"no sessions yet: {hermes.backend.location} does not exist",
                subject=hermes.backend.location,
            )
        _print_refresh(0, 0, [], as_json=as_json, named=False)
        return
    from hermes_es.commands.prompts_admin import refresh_prompts

    result = refresh_prompts(hermes.engine(), session_ref)
    _print_refresh(
        result.holding,
        result.requested,
        result.targeted,
        as_json=as_json,
        named=session_ref is not None,
    )


def _print_refresh(
    holding: int, requested: int, targeted: list[str], *, as_json: bool, named: bool
) -> None:
    """Report a refresh: how many sessions hold a stored prompt and what happens next."""
    if as_json:
        echo_json({"holding": holding, "requested": requested, "sessions": targeted})
        return
    noun = "session holds" if holding == 1 else "sessions hold"
    echo(f"{holding} {noun} a stored prompt")
    if holding:
        already = holding - requested
        note = f" ({already} already had one pending)" if already else ""
        echo(
            f"refresh requested{note}; each rebuilds its prompt from the current sources "
            "on its next turn"
        )
    elif named:
        echo(f"session {targeted[0]} holds no stored prompt; its next turn builds one")
    else:
        echo("nothing to refresh")


@click.command("repair-prompts")
@click.argument("session_ref", metavar="[SESSION_ID]", required=False)
@click.option("--apply", "apply", is_flag=True, help="Clear the proposed rows (default: dry run).")
@click.option("--json", "as_json", is_flag=True, help="Print the scan as JSON.")
@click.pass_context
def repair_prompts_cmd(
    ctx: click.Context, session_ref: str | None, apply: bool, as_json: bool
) -> None:
    """Find stored prompts missing the '## Skill Safety' guidance although the session's tools
    include skill_manage, and propose clearing them (their next turn rebuilds the prompt).

    Rows with no readable tools pin or a memory-only pin are reported as unverifiable and left
    alone; name a SESSION_ID to clear one explicitly. Without --apply nothing changes.

    Example: hermes sessions repair-prompts --apply
    """
    from hermes_es.commands.prompts_admin import apply_repairs, scan_prompts

    hermes = get_hermes(ctx)
    if session_ref is None and not hermes.backend.exists():
        if as_json:
            echo_json({"applied": apply, "counts": {}, "to_clear": 0, "cleared": 0, "sessions": []})
        else:
            echo("no sessions yet; nothing to repair")
        return
    report = scan_prompts(hermes.reader(), session_ref)
    if apply and report.to_clear:
        report = apply_repairs(hermes.engine(), report)
    elif apply:
        report = _mark_applied(report)
    if as_json:
        echo_json(
            {
                "applied": report.applied,
                "counts": report.counts,
                "to_clear": len(report.to_clear),
                "cleared": sum(1 for row in report.rows if row.cleared),
                "sessions": report.rows,
            }
        )
        return
    _print_repair(report)


def _mark_applied(report: RepairReport) -> RepairReport:
    """The report of an apply that had nothing to clear."""
    import msgspec

    return msgspec.structs.replace(report, applied=True)


def _print_repair(report: RepairReport) -> None:
    """Print a repair scan for people: notable rows, counts, and what to do next."""
    shown = [row for row in report.rows if report.explicit or row.kind.startswith(("cand", "unv"))]
    for row in shown:
        echo(_row_line(row, report.applied))
    counts = ", ".join(f"{n} {kind}" for kind, n in report.counts.items() if n) or "none"
    echo(f"scanned {len(report.rows)} session(s): {counts}")
    pending = report.to_clear
    if report.applied:
        cleared = sum(1 for row in report.rows if row.cleared)
        echo(f"cleared {cleared} stored prompt(s); each rebuilds on its next turn")
    elif pending and report.explicit:
        echo("dry run: the named session's stored prompt will be cleared on --apply")
    elif pending:
        echo(f"dry run: {len(pending)} stored prompt(s) would be cleared; rerun with --apply")
    else:
        echo("nothing to repair")


def _row_line(row: RepairRow, applied: bool) -> str:
    """One session's line: id, class, what happens to it and why."""
    if row.cleared:
        action = "cleared"
    elif row.action == "clear" and applied:
        action = "not cleared (changed since the scan)"
    elif row.action == "clear":
        action = "will be cleared on --apply" if row.explicit else "would clear"
    else:
        action = "unchanged"
    title = f" ({row.title})" if row.title else ""
    return f"{row.session_id}{title}: {row.kind}, {action} - {row.explanation}"
