"""Read-only health probes of state.db for ``hermes doctor``: integrity, log head, FTS index."""

from __future__ import annotations

import apsw

QUICK_CHECK_LIMIT = 20
"""The most problems one integrity probe reports."""


def integrity_problems(conn: apsw.Connection, *, full: bool = False) -> list[str]:
    """SQLite's own consistency check (``quick_check``, or ``integrity_check`` when ``full``).

    Returns the problems it lists; an empty list means the file is sound.
    """
    pragma = "integrity_check" if full else "quick_check"
    rows = conn.execute(f"PRAGMA {pragma}({QUICK_CHECK_LIMIT})").fetchall()
    problems = [str(row[0]) for row in rows]
    return [] if problems == ["ok"] else problems


def log_head(conn: apsw.Connection) -> int:
    """The id of the newest event in the log (0 for an empty log)."""
    rows = conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchall()
    return int(rows[0][0])


def log_size(conn: apsw.Connection) -> int:
    """How many events the log holds."""
    return int(conn.execute("SELECT COUNT(*) FROM events").fetchall()[0][0])


def fts_problem(conn: apsw.Connection, table: str = "messages_fts") -> str | None:
    """Run FTS5's ``integrity-check`` against the index and its content table.

    The command is written as an INSERT but changes nothing; it fails when the index and the
    ``messages`` rows disagree. Returns SQLite's message, or None when the index is sound.
    """
    try:
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")
    except apsw.Error as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
