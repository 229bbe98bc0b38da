"""Choosing how deleted messages leave the full-text index without leaving a readable trace.

FTS5 ``secure-delete`` rewrites every index page holding a deleted token: exact, but it costs
milliseconds per deleted message. For a large delete it is far cheaper to record ordinary
delete markers and then ``optimize`` (rewrite) the whole index, which drops the deleted tokens
from every segment; freed pages are zeroed by ``PRAGMA secure_delete``. Either way nothing of
the deleted text stays readable once the transaction commits and the WAL is truncated.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import apsw

SECURE_COST_PER_DELETED = 2e-3
"""Seconds per deleted message with secure-delete (measured, see bench/README.md)."""
OPTIMIZE_COST_PER_INDEXED = 8e-6
"""Seconds per indexed message for a full ``optimize``."""


def indexed_messages(conn: apsw.Connection) -> int:
    """How many messages the index holds (from the session counters, not a table scan)."""
    rows = conn.execute("SELECT COALESCE(SUM(message_count), 0) FROM sessions").fetchall()
    return int(rows[0][0])


def prefer_optimize(deleted: int, indexed: int) -> bool:
    """True when markers plus one ``optimize`` beat secure-delete for this many rows."""
    return deleted * SECURE_COST_PER_DELETED > indexed * OPTIMIZE_COST_PER_INDEXED


@contextmanager
def purging(conn: apsw.Connection, *, optimize: bool) -> Iterator[None]:
    """Run index deletes inside; with ``optimize``, rewrite the index afterwards.

    Must run inside the caller's transaction so the switch and the rewrite commit (or roll
    back) with the delete itself.
    """
    if not optimize or getattr(conn, "backend", "sqlite") != "sqlite":
        yield  # (a PostgreSQL index has no segments to rewrite: deleted rows are vacuumed)
        return
    conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('secure-delete', 0)")
    yield
    conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
    conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('secure-delete', 1)")
