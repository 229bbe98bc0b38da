"""Session lists for ``hermes sessions list``, pickers and ``stats`` (read side, apsw only).

A conversation that compression split into several sessions is one row: its live tip (the
segment with ``continued_into = ''``, or whose continuation was deleted), titled by the tip (or
the root when the tip has none) and previewed by the root's first user message. It counts as
archived when its tip is, or when any segment was archived by the user (see commands/archive).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import apsw
import msgspec

DEFAULT_HIDDEN_SOURCES = ("cron", "kanban", "tool")
"""Automation sources left out by default, the same everywhere: ``hermes sessions list``,
``hermes sessions search`` and ``SessionEngine.search()``; naming a source (``--source``,
``sources=``) searches or lists exactly that source."""
PICKER_HIDDEN = ("oneshot", *DEFAULT_HIDDEN_SOURCES)
"""Sources never offered by session pickers (/sessions, TUI, Desktop, dashboard)."""
LIST_HIDDEN = DEFAULT_HIDDEN_SOURCES
"""Sources ``hermes sessions list`` leaves out by default (one-shot runs are CLI history)."""


class SessionRow(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation as a list shows it (the live tip of its compression chain)."""

    id: str
    root_id: str
    title: str
    preview: str
    source: str
    started_at: float
    last_active: float
    workspace: str
    segments: int
    messages: int
    ended: bool
    archived: str
    pinned: bool


_CHAIN_ARCHIVED = (
    "CASE WHEN t.archived <> '' THEN t.archived WHEN EXISTS (SELECT 1 FROM sessions c"
    " WHERE c.root_id = t.root_id AND c.archived = 'user') THEN 'user' ELSE '' END"
)
"""Whether a conversation counts as archived (spelled out again in WHERE: PostgreSQL does not
let WHERE name a select-list alias)."""

_SELECT = (
    "SELECT t.id, t.root_id, CASE WHEN t.title <> '' THEN t.title ELSE COALESCE(r.title, '') END,"
    " CASE WHEN COALESCE(r.preview, '') <> '' THEN r.preview ELSE t.preview END,"
    " t.source, COALESCE(r.started_at, t.started_at), t.last_active, t.workspace_key,"
    " (SELECT COUNT(*) FROM sessions c WHERE c.root_id = t.root_id),"
    " (SELECT SUM(c.message_count) FROM sessions c WHERE c.root_id = t.root_id),"
    f" t.ended, {_CHAIN_ARCHIVED} AS chain_archived,"
    " t.pinned"
    " FROM sessions t LEFT JOIN sessions r ON r.id = t.root_id"
    " WHERE (t.continued_into = '' OR NOT EXISTS (SELECT 1 FROM sessions x"
    " WHERE x.id = t.continued_into)) AND t.hidden = 0"
)


def _row(r: Sequence[object]) -> SessionRow:
    return SessionRow(
        id=str(r[0]),
        root_id=str(r[1]),
        title=str(r[2]),
        preview=str(r[3]),
        source=str(r[4]),
        started_at=float(r[5]),  # type: ignore[arg-type]
        last_active=float(r[6]),  # type: ignore[arg-type]
        workspace=str(r[7]),
        segments=int(r[8]),  # type: ignore[call-overload]
        messages=int(r[9] or 0),  # type: ignore[call-overload]
        ended=bool(r[10]),
        archived=str(r[11]),
        pinned=bool(r[12]),
    )


def workspace_clause(needle: str) -> tuple[str, list[object]]:
    """SQL matching ``t.workspace_key`` by path substring (an exact directory basename is one
    too), case-sensitively like the paths themselves: one rule for both."""
    needle = os.path.expanduser(needle.strip())
    if len(needle) > 1:
        needle = needle.rstrip("/")
    return "instr(t.workspace_key, ?) > 0", [needle]


def list_sessions(
    conn: apsw.Connection,
    *,
    sources: Sequence[str] | None = None,
    workspace: str | None = None,
    limit: int = 50,
    archived: bool = False,
    picker: bool = False,
) -> list[SessionRow]:
    """Conversations, newest activity first, one row per compression chain.

    ``sources`` given: exactly those sources. Otherwise a list hides kanban and tool runs and
    a ``picker`` also hides one-shot runs. ``archived`` shows only archived conversations
    instead of only unarchived ones.
    """
    sql = _SELECT
    params: list[object] = []
    if sources:
        sql += f" AND t.source IN ({','.join('?' * len(sources))})"
        params.extend(sources)
    else:
        hidden = PICKER_HIDDEN if picker else LIST_HIDDEN
        sql += f" AND t.source NOT IN ({','.join('?' * len(hidden))})"
        params.extend(hidden)
    sql += f" AND {_CHAIN_ARCHIVED} " + ("<> ''" if archived else "= ''")
    if workspace:
        clause, more = workspace_clause(workspace)
        sql += " AND " + clause
        params.extend(more)
    sql += " ORDER BY t.last_active DESC, t.id DESC"
    if limit > 0:
        sql += " LIMIT ?"
        params.append(limit)
    return [_row(r) for r in conn.execute(sql, params)]


def turn_states(conn: apsw.Connection, session_ids: list[str]) -> dict[str, str]:
    """``turn_state`` (unknown | running | queued) of each listed session that has turn work
    (``turn_work`` holds only sessions with pending turns: one short read)."""
    wanted = set(session_ids)
    rows = conn.execute("SELECT session_id, state FROM turn_work").fetchall()
    return {str(sid): str(state) for sid, state in rows if sid in wanted}


def picker_sessions(conn: apsw.Connection, *, limit: int = 50) -> list[SessionRow]:
    """What /sessions and dashboards offer: no one-shot, kanban or tool runs, no archive."""
    return list_sessions(conn, limit=limit, picker=True)


class SourceCount(msgspec.Struct, frozen=True, kw_only=True):
    """Sessions and messages of one source."""

    source: str
    sessions: int
    conversations: int
    messages: int


class StoreStats(msgspec.Struct, frozen=True, kw_only=True):
    """What ``hermes sessions stats`` prints."""

    sessions: int
    conversations: int
    messages: int
    archived: int
    pinned: int
    ended: int
    by_source: list[SourceCount]
    db_bytes: int
    wal_bytes: int
    events: int
    path: str


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def db_sizes(db_path: Path) -> tuple[int, int]:
    """Bytes of state.db and of its WAL file."""
    return _file_size(db_path), _file_size(Path(str(db_path) + "-wal"))


def store_stats(conn: apsw.Connection, db_path: Path) -> StoreStats:
    """Counts by source, message totals and file sizes."""
    by_source = [
        SourceCount(source=str(s), sessions=int(n), conversations=int(c), messages=int(m or 0))
        for s, n, c, m in conn.execute(
            "SELECT source, COUNT(*), SUM(CASE WHEN continued_into = '' THEN 1 ELSE 0 END),"
            " SUM(message_count)"
            " FROM sessions GROUP BY source ORDER BY COUNT(*) DESC, source"
        )
    ]
    row = conn.execute(
        "SELECT COUNT(*), SUM(CASE WHEN continued_into = '' THEN 1 ELSE 0 END),"
        " SUM(message_count),"
        " SUM(CASE WHEN archived <> '' AND continued_into = '' THEN 1 ELSE 0 END),"
        " SUM(pinned), SUM(ended) FROM sessions"
    ).fetchall()[0]
    events = conn.execute("SELECT MAX(id) FROM events").fetchall()[0][0]
    db_bytes, wal_bytes = db_sizes(db_path)
    return StoreStats(
        sessions=int(row[0]),
        conversations=int(row[1] or 0),
        messages=int(row[2] or 0),
        archived=int(row[3] or 0),
        pinned=int(row[4] or 0),
        ended=int(row[5] or 0),
        by_source=by_source,
        db_bytes=db_bytes,
        wal_bytes=wal_bytes,
        events=int(events or 0),
        path=str(db_path),
    )
