"""Lineage edges: compression, branch, delegate and reset children, stated explicitly."""

from __future__ import annotations

import apsw

from hermes_es import events as ev
from hermes_es.aggregates.state import SessionState
from hermes_es.projections.base import Change


class LineageProjector:
    """Maintains ``lineage (parent_id, child_id, kind, at)``."""

    name = "lineage"
    applies_to: tuple[type, ...] = (ev.SessionStarted,)
    """The events ``apply`` reacts to (``ProjectionSet`` calls it for no other)."""

    def __init__(self, prefix: str = "") -> None:
        self.table = f"{prefix}lineage"

    def tables(self) -> list[str]:
        """Table names."""
        return [self.table]

    def schema(self) -> list[str]:
        """One edge per child."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            " child_id TEXT PRIMARY KEY, parent_id TEXT NOT NULL, kind TEXT NOT NULL,"
            " at REAL NOT NULL) WITHOUT ROWID"
        ]

    def indexes(self) -> list[str]:
        """Children by parent."""
        return ["CREATE INDEX IF NOT EXISTS lineage_parent ON lineage (parent_id, kind)"]

    def apply(self, conn: apsw.Connection, change: Change) -> None:
        """Record the edge a child's start names."""
        e = change.event
        if isinstance(e, ev.SessionStarted) and e.parent_id:
            conn.execute(
                f"INSERT OR REPLACE INTO {self.table} (child_id, parent_id, kind, at)"
                " VALUES (?, ?, ?, ?)",
                (e.session_id, e.parent_id, e.parent_kind, e.at),
            )

    def settle(self, conn: apsw.Connection, states: dict[str, SessionState]) -> None:
        """Nothing per session."""

    def forget(self, conn: apsw.Connection, session_id: str) -> None:
        """Remove the edge to the deleted session (edges from it stay: children keep history)."""
        conn.execute(f"DELETE FROM {self.table} WHERE child_id = ?", (session_id,))
