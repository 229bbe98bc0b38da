"""Stored system prompts, content-addressed: one row per distinct prompt text."""

from __future__ import annotations

import apsw

from hermes_es import events as ev
from hermes_es.aggregates.state import SessionState
from hermes_es.projections.base import Change


class PromptsProjector:
    """Maintains ``prompts (sha256, text)``."""

    name = "prompts"
    applies_to: tuple[type, ...] = (ev.PromptStored,)
    """The events ``apply`` reacts to (``ProjectionSet`` calls it for no other)."""

    def __init__(self, prefix: str = "") -> None:
        self.table = f"{prefix}prompts"

    def tables(self) -> list[str]:
        """Table names."""
        return [self.table]

    def schema(self) -> list[str]:
        """Prompt texts by hash."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            " sha256 TEXT PRIMARY KEY, text TEXT NOT NULL, stored_at REAL NOT NULL) WITHOUT ROWID"
        ]

    def indexes(self) -> list[str]:
        """None."""
        return []

    def apply(self, conn: apsw.Connection, change: Change) -> None:
        """Store a prompt text the first time it is seen."""
        e = change.event
        if isinstance(e, ev.PromptStored):
            conn.execute(
                f"INSERT OR IGNORE INTO {self.table} (sha256, text, stored_at) VALUES (?, ?, ?)",
                (e.sha256, e.text, e.at),
            )

    def settle(self, conn: apsw.Connection, states: dict[str, SessionState]) -> None:
        """Nothing per session."""

    def forget(self, conn: apsw.Connection, session_id: str) -> None:
        """Prompts are shared between sessions and hold no conversation text."""

    def unreferenced(self, conn: apsw.Connection) -> list[str]:
        """Hashes of stored prompts no remaining session sends (after a delete)."""
        rows = conn.execute(
            f"SELECT sha256 FROM {self.table} WHERE sha256 NOT IN"
            f" (SELECT prompt_hash FROM {self.table.removesuffix('prompts')}sessions)"
        ).fetchall()
        return [str(r[0]) for r in rows]

    def drop(self, conn: apsw.Connection, sha: str) -> None:
        """Remove one stored prompt's row."""
        conn.execute(f"DELETE FROM {self.table} WHERE sha256 = ?", (sha,))
