"""``hermes sessions list``, ``search`` and ``stats``: read commands over the projections.

Start-up matters here: this module imports only click, apsw (through store.db) and the query
modules it needs, never eventsourcing (rich only to measure non-ASCII widths); tables are plain
aligned text, every cell made safe by :mod:`hermes_es.terminal_text`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click
import msgspec

from hermes_es import terminal_text
from hermes_es.cli.base import Count, Hermes, echo_json, get_hermes, when
from hermes_es.terminal_text import cell, echo, one_line

if TYPE_CHECKING:
    import apsw

    from hermes_es.queries.search import SearchGroup

ROLES = ("user", "assistant", "tool", "system")


def _open_light(hermes: Hermes) -> apsw.Connection:
    """A plain connection for list/stats (no tokenizer, no projection modules)."""
    backend = hermes.backend
    backend.require()
    return backend.light_reader()


def _terminal_columns(fallback: int = 120) -> int:
    """``shutil.get_terminal_size().columns`` without importing shutil (and the compression
    modules it brings) on the list path: ``$COLUMNS`` when set, else the terminal's width."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        columns = 0
    return columns if columns > 0 else fallback


def _short_path(path: str) -> str:
    home = os.path.expanduser("~")
    if home and home != "/" and (path == home or path.startswith(home + os.sep)):
        return "~" + path[len(home) :]
    return path


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Plain left-aligned columns separated by two spaces (cells made safe, aligned by width)."""
    return terminal_text.table(headers, rows)


@click.command("list")
@click.option(
    "--source",
    "sources",
    multiple=True,
    metavar="TAG",
    help="Only this source (repeatable); shows exactly that source, hidden ones included.",
)
@click.option(
    "--workspace",
    metavar="NEEDLE",
    default=None,
    help="Only sessions whose workspace (git root, else cwd) contains NEEDLE (case-sensitive).",
)
@click.option(
    "--limit",
    type=Count(0),
    default=50,
    show_default=True,
    help="0 = no limit.",
)
@click.option("--archived", is_flag=True, help="Show archived conversations instead.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def list_cmd(
    ctx: click.Context,
    sources: tuple[str, ...],
    workspace: str | None,
    limit: int,
    archived: bool,
    as_json: bool,
) -> None:
    """List conversations, newest activity first: title, preview, last active, source, id and
    workspace. A conversation split by compression is one row (its live tip). cron, kanban and
    tool runs are left out unless you name them with --source (the same default scope as
    'hermes sessions search'); one-shot runs are listed.

    Example: hermes sessions list --workspace my-project --limit 10
    """
    from hermes_es.queries.listing import list_sessions, turn_states

    hermes = get_hermes(ctx)
    rows = []
    turns: dict[str, str] = {}
    if hermes.backend.exists():  # a fresh profile simply has no sessions yet
        conn = _open_light(hermes)
        try:
            rows = list_sessions(
                conn, sources=sources or None, workspace=workspace, limit=limit, archived=archived
            )
            turns = turn_states(conn, [r.id for r in rows])
        finally:
            conn.close()
    if as_json:
        echo_json([{**msgspec.to_builtins(r), "turn_state": turns.get(r.id, "")} for r in rows])
        return
    if not rows:
        echo("no archived sessions" if archived else "no sessions")
        return
    term = _terminal_columns()
    preview_w = max(16, min(48, term - 110))
    table = [
        (
            cell(r.title or "—", 28),
            cell(r.preview or "", preview_w),
            when(r.last_active),
            one_line(r.source),
            one_line(r.id)
            + (f" (+{r.segments - 1})" if r.segments > 1 else "")
            + (f" [{turns[r.id]} turn]" if r.id in turns else ""),
            cell(_short_path(r.workspace), 40),
        )
        for r in rows
    ]
    for line in render_table(
        ("TITLE", "PREVIEW", "LAST ACTIVE", "SOURCE", "ID", "WORKSPACE"), table
    ):
        echo(line)


SNIPPET_OPEN_SHOWN = terminal_text.clean("\x02")
SNIPPET_CLOSE_SHOWN = terminal_text.clean("\x03")


def _highlight(snippet: str, color: bool) -> str:
    """A snippet with its matches marked: bold yellow on a terminal, ``**`` otherwise.

    Each piece is made safe (:func:`one_line`) before our own styling is added around it.
    """
    parts = one_line(snippet.replace("\n", " ")).split(SNIPPET_OPEN_SHOWN)
    out = [parts[0]]
    for part in parts[1:]:
        hit, _, rest = part.partition(SNIPPET_CLOSE_SHOWN)
        out.append(
            (terminal_text.styled(hit, bold=True, fg="yellow") if color else f"**{hit}**") + rest
        )
    return "".join(out)


def _snippet_json(snippet: str) -> str:
    """The snippet as ``--json`` gives it: matches wrapped in ``**``, text otherwise exact."""
    from hermes_es.queries.snippets import SNIPPET_CLOSE, SNIPPET_OPEN

    text = " ".join(snippet.split())
    return text.replace(SNIPPET_OPEN, "**").replace(SNIPPET_CLOSE, "**")


def _groups_json(groups: Sequence[SearchGroup]) -> list[dict[str, object]]:
    return [
        {
            "root_id": g.root_id,
            "tip_id": g.tip_id,
            "title": g.title,
            "source": g.source,
            "hits": [
                {
                    "session_id": r.hit.session_id,
                    "seq": r.hit.seq,
                    "role": r.hit.role,
                    "at": r.hit.at,
                    "score": r.hit.score,
                    "state": r.hit.state,
                    "snippet": _snippet_json(r.hit.snippet),
                    "before": r.before,
                    "after": r.after,
                }
                for r in g.results
            ],
        }
        for g in groups
    ]


@click.command("search")
@click.argument("query")
@click.option(
    "--source",
    "sources",
    multiple=True,
    metavar="TAG",
    help="Only this source (repeatable). cron, kanban and tool are searched only when named.",
)
@click.option(
    "--role", "roles", multiple=True, type=click.Choice(ROLES), help="Only this role (repeatable)."
)
@click.option("--limit", type=Count(1), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (matches wrapped in **).")
@click.pass_context
def search_cmd(
    ctx: click.Context,
    query: str,
    sources: tuple[str, ...],
    roles: tuple[str, ...],
    limit: int,
    as_json: bool,
) -> None:
    """Full-text search over every conversation, best match first, with one message of
    context either side; hits from one compressed conversation are grouped. Any text is a
    plain search: words must all appear, "quoted words" match as a phrase, word* as a prefix,
    and an identifier (snake_case_name, src/main.py) also finds longer ones.

    Example: hermes sessions search '"deploy script" retry*' --role assistant
    """
    from hermes_es.queries.search import search_grouped

    hermes = get_hermes(ctx)
    groups: list[SearchGroup] = []
    if hermes.backend.exists():  # a fresh profile simply has nothing to find
        groups = search_grouped(
            hermes.reader(), query, limit=limit, sources=sources or None, roles=roles or None
        )
    if as_json:
        echo_json(_groups_json(groups))
        return
    if not groups:
        echo("no matches")
        return
    color = ctx.color if ctx.color is not None else sys.stdout.isatty()
    for g in groups:
        n = len(g.results)
        hits = f"{n} hit{'s' if n != 1 else ''}"
        title, source, tip = (one_line(v) for v in (g.title or "(untitled)", g.source, g.tip_id))
        head = f"── {title}  [{source}]  {tip}  {hits}"
        terminal_text.echo_styled(terminal_text.styled(head, bold=True) if color else head)
        for r in g.results:
            where = "" if r.hit.session_id == g.tip_id else f"  in {r.hit.session_id}"
            state = "" if r.hit.state == "active" else f" [{r.hit.state}]"
            echo(
                f"  #{r.hit.seq} {one_line(r.hit.role + state)}  {when(r.hit.at)}{one_line(where)}"
            )
            if r.before is not None:
                echo(f"      ↑ {one_line(r.before.role)}: {cell(r.before.text, 90)}")
            terminal_text.echo_styled(f"      » {_highlight(r.hit.snippet, color)}")
            if r.after is not None:
                echo(f"      ↓ {one_line(r.after.role)}: {cell(r.after.text, 90)}")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


@click.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def stats_cmd(ctx: click.Context, as_json: bool) -> None:
    """Counts by source, message totals, and the size of state.db and its WAL.

    Example: hermes sessions stats --json
    """
    from hermes_es.queries.listing import store_stats

    hermes = get_hermes(ctx)
    conn = _open_light(hermes)
    try:
        stats = store_stats(conn, hermes.db_path)
    finally:
        conn.close()
    if hermes.backend.kind != "sqlite":  # a server store: its relation sizes, no local file
        import msgspec

        db_bytes, wal_bytes = hermes.backend.store_bytes()
        stats = msgspec.structs.replace(
            stats, path=hermes.backend.location, db_bytes=db_bytes, wal_bytes=wal_bytes
        )
    if as_json:
        echo_json(stats)
        return
    echo(f"store          {_short_path(stats.path)}")
    if hermes.backend.kind == "sqlite":
        echo(f"database       {_size(stats.db_bytes)}  (WAL {_size(stats.wal_bytes)})")
    else:
        echo(f"database       {_size(stats.db_bytes)}  (tables, indexes and TOAST)")
    echo(f"conversations  {stats.conversations}  ({stats.sessions} sessions)")
    echo(f"messages       {stats.messages}")
    echo(f"archived       {stats.archived}   pinned {stats.pinned}   ended {stats.ended}")
    echo(f"events         {stats.events}")
    if stats.by_source:
        echo("")
        table = [
            (s.source, str(s.conversations), str(s.sessions), str(s.messages))
            for s in stats.by_source
        ]
        for line in render_table(("SOURCE", "CONVERSATIONS", "SESSIONS", "MESSAGES"), table):
            echo(line)
