"""Health probes of state.db for ``hermes doctor``: integrity, log head, decoding, FTS index."""

from __future__ import annotations

import time
from pathlib import Path

import apsw
import msgspec

from hermes_es.store.decoding import CorruptEventError, decode_row

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


class DecodeCheck(msgspec.Struct, frozen=True, kw_only=True):
    """How many stored events were decoded, of how many, and the first that failed."""

    checked: int
    total: int
    error: CorruptEventError | None = None


DECODE_BATCH = 2000


def decode_problem(conn: apsw.Connection, *, budget: float | None = None) -> DecodeCheck:
    """Decode stored events newest first, for at most ``budget`` seconds (None: all of them).

    The newest events are always checked first: they are what the next command reads.
    """
    deadline = None if budget is None else time.monotonic() + budget
    total = log_size(conn)
    checked = 0
    before = None
    while True:
        sql = "SELECT id, originator_id, originator_version, topic, state FROM events"
        params: tuple[int, ...] = ()
        if before is not None:
            sql += " WHERE id < ?"
            params = (before,)
        rows = conn.execute(sql + f" ORDER BY id DESC LIMIT {DECODE_BATCH}", params).fetchall()
        if not rows:
            return DecodeCheck(checked=checked, total=max(total, checked))
        for position, stream, version, topic, state in rows:
            try:
                decode_row(topic, state, stream=stream, version=version, position=position)
            except CorruptEventError as exc:
                return DecodeCheck(checked=checked, total=max(total, checked), error=exc)
            checked += 1
        before = rows[-1][0]
        if deadline is not None and time.monotonic() > deadline:
            return DecodeCheck(checked=checked, total=max(total, checked))


def fts_structure_problem(db_path: Path, table: str = "messages_fts") -> str | None:
    """FTS5's structural check of the index (read-only: ``PRAGMA integrity_check(table)``).

    It runs on a connection of its own, opened for this check: FTS5 keeps the index structure
    it last read cached per connection, and its integrity method does not notice that a
    writer changed the index since, so on a long-lived connection it reports corruption that
    is not there whenever another process has written meanwhile.
    """
    from hermes_es.projections.fts import register_tokenizer
    from hermes_es.store.db import open_reader

    conn = open_reader(db_path, hooks=[register_tokenizer])
    try:
        rows = conn.execute(f"PRAGMA integrity_check({table})").fetchall()
    finally:
        conn.close()
    problems = [str(r[0]) for r in rows]
    return None if problems == ["ok"] else "; ".join(problems)


def fts_problem(conn: apsw.Connection, table: str = "messages_fts") -> str | None:
    """Run FTS5's ``integrity-check`` against the index and its content table.

    The command is written as an INSERT but changes nothing; it fails when the index and the
    ``messages`` rows disagree. Returns SQLite's message, or None when the index is sound.
    It needs the write lock: run it in a write transaction of its own (never inside a read
    snapshot, where any commit by a writer since the snapshot makes it fail).
    """
    try:
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")
    except apsw.Error as exc:
        return f"{type(exc).__name__}: {exc}"
    except CorruptEventError as exc:  # the text it compares is read from the log
        return str(exc)
    return None


def fts_content_problem(db_path: Path) -> tuple[str | None, bool]:
    """Compare the index with the messages it indexes, when the store can be written.

    Returns (problem or None, whether the content was compared). The comparison runs in an
    IMMEDIATE transaction on a connection of its own, rolled back: it sees one committed state
    and waits for writers like any writer does. A store this process cannot write is left
    alone (structure only).
    """
    from hermes_es.projections.fts import register_tokenizer
    from hermes_es.store.db import open_db

    try:
        conn = open_db(db_path, hooks=[register_tokenizer])
    except apsw.Error:
        return None, False
    try:
        if conn.readonly("main"):
            return None, False
        try:
            conn.execute("BEGIN IMMEDIATE")
        except (apsw.ReadOnlyError, apsw.CantOpenError):
            return None, False
        try:
            return fts_problem(conn), True
        finally:
            conn.execute("ROLLBACK")
    finally:
        conn.close()
