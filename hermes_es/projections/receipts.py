"""Content-free receipts of physical deletes (id, time, actor, counts, digest)."""

from __future__ import annotations

import apsw

from hermes_es import events as ev
from hermes_es.aggregates.state import SessionState
from hermes_es.projections.base import Change


class ReceiptsProjector:
    """Maintains ``deletions``."""

    name = "receipts"
    applies_to: tuple[type, ...] = (ev.SessionDeleted,)
    """The events ``apply`` reacts to (``ProjectionSet`` calls it for no other)."""

    def __init__(self, prefix: str = "") -> None:
        self.table = f"{prefix}deletions"

    def tables(self) -> list[str]:
        """Table names."""
        return [self.table]

    def schema(self) -> list[str]:
        """One row per delete (a session id deleted twice has two rows)."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            " position INTEGER PRIMARY KEY, session_id TEXT NOT NULL, deleted_at REAL NOT NULL,"
            " actor TEXT NOT NULL, events INTEGER NOT NULL, messages INTEGER NOT NULL,"
            " digest TEXT NOT NULL, reason TEXT NOT NULL)"
        ]

    def indexes(self) -> list[str]:
        """Receipts by session."""
        return ["CREATE INDEX IF NOT EXISTS deletions_session ON deletions (session_id)"]

    def apply(self, conn: apsw.Connection, change: Change) -> None:
        """Record a delete receipt."""
        e = change.event
        if isinstance(e, ev.SessionDeleted):
            conn.execute(
                f"INSERT INTO {self.table} VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    change.position,
                    e.session_id,
                    e.at,
                    e.actor,
                    e.events,
                    e.messages,
                    e.digest,
                    e.reason,
                ),
            )

    def settle(self, conn: apsw.Connection, states: dict[str, SessionState]) -> None:
        """Nothing per session."""

    def forget(self, conn: apsw.Connection, session_id: str) -> None:
        """Receipts outlive the session by design."""
