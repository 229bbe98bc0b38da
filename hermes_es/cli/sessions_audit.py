"""``hermes sessions history`` and ``hermes sessions show``: the audit log and transcripts."""

from __future__ import annotations

import click

from hermes_es.cli.base import Count, echo_json, get_hermes, when
from hermes_es.errors import SessionNotFoundError
from hermes_es.terminal_text import echo, one_line, table


@click.command("history")
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def history_cmd(ctx: click.Context, session: str, as_json: bool) -> None:
    """Print every event of SESSION (id, unique prefix or title): version, time, type,
    actor and a one-line summary. A deleted session shows its delete receipt.

    Example: hermes sessions history 20250305_091523_a1b2c3 --json
    """
    from hermes_es.queries.history import deletion_receipts, session_history
    from hermes_es.queries.resolve import resolve_session

    conn = get_hermes(ctx).reader()
    try:
        sid = resolve_session(conn, session)
    except SessionNotFoundError:
        receipts = deletion_receipts(conn, session)
        if not receipts:
            raise
        if as_json:
            echo_json({"session_id": session, "events": [], "deletions": receipts})
            return
        for r in receipts:
            echo(
                f"{session} was deleted {when(r.deleted_at)} by {r.actor or '?'} ({r.reason}): "
                f"{r.events} events, {r.messages} messages, transcript sha256 {r.digest}"
            )
        return
    entries = session_history(conn, sid)
    receipts = deletion_receipts(conn, sid)
    if as_json:
        echo_json({"session_id": sid, "events": entries, "deletions": receipts})
        return
    if not entries:
        echo(f"{sid}: no events")
    rows = [(f"v{e.version}", when(e.at), e.type, e.actor or "-", e.summary) for e in entries]
    for line in table(("VERSION", "TIME", "EVENT", "ACTOR", "SUMMARY"), rows) if rows else []:
        echo(line)
    for r in receipts:
        echo(
            f"(an earlier session with this id was deleted {when(r.deleted_at)}: "
            f"{r.messages} messages)"
        )


@click.command("show")
@click.argument("session")
@click.option(
    "--as-of",
    "as_of",
    type=Count(1),
    default=None,
    help="Show the transcript as it stood at this event version (1 = just started).",
)
@click.option(
    "--all", "show_all", is_flag=True, help="Also show rewound and edited (inactive) messages."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def show_cmd(
    ctx: click.Context, session: str, as_of: int | None, show_all: bool, as_json: bool
) -> None:
    """Print the transcript of SESSION (what a display export shows), optionally as of a version.

    Example: hermes sessions show "my project" --as-of 12
    """
    from hermes_es.queries.resolve import resolve_session
    from hermes_es.queries.transcript import last_version, messages_as_of, messages_of

    conn = get_hermes(ctx).reader()
    sid = resolve_session(conn, session)
    scope = "all" if show_all else "display"
    if as_of is not None:
        messages = messages_as_of(conn, sid, as_of, scope=scope)
    else:
        messages = messages_of(conn, sid, scope=scope)
    from hermes_es.queries.turns import head as head_state

    state = head_state(conn, sid)
    turn_state = state.turn_state if state is not None else ""
    if as_json:
        echo_json(
            {"session_id": sid, "as_of": as_of, "turn_state": turn_state, "messages": messages}
        )
        return
    if as_of is not None:
        last = last_version(conn, sid)
        echo(
            f"{sid} as of event v{as_of} of {last}"
            f"{' (the latest)' if as_of == last else ''}: {len(messages)} message(s) shown"
        )
    if not messages:
        echo("(no messages)")
    if state is not None and state.turns_unknown:
        echo(
            f"⚠ turn {state.turns_unknown[0]} is unknown: a gateway stopped while it ran, so its"
            f" outcome was not recorded; queued turns wait. Resolve it: hermes sessions resolve"
            f" {sid} --discard",
            err=True,
        )
    for m in messages:
        flags = "" if m.state == "active" else f" [{m.state}]"
        if m.imported:
            flags += " [imported]"
        tool = f" ({one_line(m.tool_name)})" if m.tool_name else ""
        echo(f"── #{m.seq} {one_line(m.role)}{tool}{flags} {when(m.at)}")
        if m.content:
            echo(m.content)
        for call in m.tool_calls:
            name, args = one_line(str(call.get("name"))), one_line(str(call.get("arguments", "")))
            echo(f"  ↳ tool call {name}({args}) id={one_line(str(call.get('id')))}")
