"""``hermes sessions optimize``: merge FTS5 segments and VACUUM, leaving session data alone."""

from __future__ import annotations

import time
from pathlib import Path

import apsw
import msgspec

from hermes_es.errors import SessionNotFoundError
from hermes_es.projections.catalog import connect
from hermes_es.queries.listing import db_sizes
from hermes_es.store.db import checkpoint
from hermes_es.store.scrub import clear_pending


class OptimizeResult(msgspec.Struct, frozen=True, kw_only=True):
    """Sizes before and after, and how long each step took."""

    db_before: int
    wal_before: int
    db_after: int
    wal_after: int
    merge_seconds: float
    vacuum_seconds: float


def merge_fts(conn: apsw.Connection) -> None:
    """Merge every FTS5 segment into one (makes secure-delete of many rows much cheaper)."""
    with conn:
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES('optimize')")


def optimize_store(db_path: Path) -> OptimizeResult:
    """Merge the full-text index into one segment, VACUUM, and truncate the WAL."""
    if not db_path.exists():
        raise SessionNotFoundError(f"no store at {db_path}", subject=str(db_path))
    db_before, wal_before = db_sizes(db_path)
    conn = connect(db_path)
    try:
        start = time.perf_counter()
        merge_fts(conn)
        merged = time.perf_counter()
        checkpoint(conn, truncate=True)
        conn.execute("VACUUM")
        checkpoint(conn, truncate=True)
        clear_pending(db_path)  # the file is rewritten and the WAL truncated: nothing is left
        vacuumed = time.perf_counter()
    finally:
        conn.close()
    db_after, wal_after = db_sizes(db_path)
    return OptimizeResult(
        db_before=db_before,
        wal_before=wal_before,
        db_after=db_after,
        wal_after=wal_after,
        merge_seconds=merged - start,
        vacuum_seconds=vacuumed - merged,
    )
