"""Resolving what a person typed into one session id: id, unique prefix, title, ``latest``."""

from __future__ import annotations

from collections.abc import Sequence

import apsw

from hermes_es.aggregates.validation import MAX_SESSION_ID, MAX_TITLE, check_text
from hermes_es.errors import AmbiguousSessionError, SessionNotFoundError, ValidationError
from hermes_es.queries.lookup import base_title, like_escape

LIST_HINT = "run 'hermes sessions list' to see sessions"
MAX_REFERENCE = max(MAX_SESSION_ID, MAX_TITLE + len(" #999999"))
"""The longest reference that can name anything: a full id, or a title with its #N variant."""


def check_reference(ref: str) -> str:
    """Refuse, before any query, a reference no session id or title can equal or start with:
    too long, or not valid Unicode."""
    if len(ref) > MAX_REFERENCE:
        raise ValidationError(
            f"the session reference is {len(ref):,} characters, longer than any session id or "
            f"title (at most {MAX_REFERENCE}); {LIST_HINT}",
            subject=ref[:40],
        )
    check_text(ref, "session reference")
    return ref


def latest_session(
    conn: apsw.Connection, *, sources: Sequence[str] | None = None, workspace: str | None = None
) -> str | None:
    """The most recently active session (optionally of these sources / this workspace)."""
    sql = "SELECT id FROM sessions WHERE continued_into = ''"
    params: list[object] = []
    if sources:
        sql += f" AND source IN ({','.join('?' * len(sources))})"
        params.extend(sources)
    if workspace:
        sql += " AND workspace_key = ?"
        params.append(workspace)
    sql += " ORDER BY last_active DESC, id DESC LIMIT 1"
    rows = conn.execute(sql, params).fetchall()
    return str(rows[0][0]) if rows else None


def by_title(conn: apsw.Connection, title: str) -> str | None:
    """The newest session whose title is ``title`` or one of its ``#N`` lineage variants."""
    base = base_title(title.strip())
    if not base:
        return None
    exact = conn.execute(
        "SELECT id FROM sessions WHERE title = ? COLLATE NOCASE", (title.strip(),)
    ).fetchall()
    if base.lower() != title.strip().lower():
        return str(exact[0][0]) if exact else None
    rows = conn.execute(
        "SELECT id FROM sessions WHERE title = ? COLLATE NOCASE"
        " OR title LIKE ? ESCAPE '\\' ORDER BY started_at DESC, id DESC",
        (base, like_escape(base) + " #%"),
    ).fetchall()
    for (sid,) in rows:
        return str(sid)
    return None


def chain_tip(conn: apsw.Connection, session_id: str) -> str:
    """Follow compression continuations to the live tip of a conversation."""
    seen = {session_id}
    current = session_id
    while True:
        rows = conn.execute(
            "SELECT continued_into FROM sessions WHERE id = ?", (current,)
        ).fetchall()
        if not rows or not rows[0][0] or rows[0][0] in seen:
            return current
        following = str(rows[0][0])
        if not conn.execute("SELECT 1 FROM sessions WHERE id = ?", (following,)).fetchall():
            return current  # the continuation was deleted: this segment is the live end
        current = following
        seen.add(current)


def resolve_session(
    conn: apsw.Connection, ref: str, *, sources: Sequence[str] | None = None
) -> str:
    """One session id for a full id, ``latest``, a title (newest variant) or a unique prefix."""
    ref = check_reference(ref).strip()
    if not ref:
        raise SessionNotFoundError(f"no session named; {LIST_HINT}", subject=ref)
    if ref == "latest":
        found = latest_session(conn, sources=sources)
        if found is None:
            raise SessionNotFoundError(f"there are no sessions yet; {LIST_HINT}", subject=ref)
        return found
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (ref,)).fetchall():
        return ref
    titled = by_title(conn, ref)
    if titled:
        return titled
    rows = conn.execute(
        "SELECT id FROM sessions WHERE id LIKE ? ESCAPE '\\' ORDER BY id LIMIT 11",
        (like_escape(ref) + "%",),
    ).fetchall()
    if len(rows) == 1:
        return str(rows[0][0])
    if rows:
        candidates = [str(r[0]) for r in rows[:10]]
        more = " …" if len(rows) > 10 else ""
        raise AmbiguousSessionError(
            f"{ref!r} matches several sessions: {', '.join(candidates)}{more}; give more of the id",
            subject=ref,
            candidates=candidates,
        )
    raise SessionNotFoundError(f"no session matches {ref!r}; {LIST_HINT}", subject=ref)
