"""One consistent read snapshot: every read inside it sees the same committed state."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import apsw


@contextmanager
def read_snapshot(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """A deferred read transaction (a WAL snapshot); reuses one that is already open."""
    if conn.in_transaction:
        yield conn
        return
    conn.execute("BEGIN DEFERRED")
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
