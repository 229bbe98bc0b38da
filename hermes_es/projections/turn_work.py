"""The ``turn_work`` read model: one row per session whose gateway turns are not all done.

A row holds the session's ``turn_state`` (queued | running | unknown) and its running turn. It
exists while the session has a turn queued, running or unknown and is removed when the last
one is done, so the table stays as small as the gateway's pending work: a gateway's start-up
finds the turns to mark unknown and the queues to resume with one read of it, not by decoding
every session's head, and ``hermes sessions list`` marks paused sessions from it.
"""

from __future__ import annotations

import apsw

from hermes_es.aggregates.state import SessionState
from hermes_es.projections.base import Change


class TurnWorkProjector:
    """Keeps ``turn_work`` equal to the sessions whose turn state is not idle."""

    name = "turn_work"
    applies_to: tuple[type, ...] = ()
    """The events ``apply`` reacts to (``ProjectionSet`` calls it for no other)."""

    def __init__(self, prefix: str = "") -> None:
        self.p = prefix
        self.table = f"{prefix}turn_work"
        self._upsert = (
            f"INSERT INTO {self.table} (session_id, state, running) VALUES (?, ?, ?)"
            " ON CONFLICT (session_id) DO UPDATE SET state = excluded.state,"
            " running = excluded.running"
        )
        self._delete = f"DELETE FROM {self.table} WHERE session_id = ?"

    def tables(self) -> list[str]:
        """Table names."""
        return [self.table]

    def schema(self) -> list[str]:
        """The table: a session id, its turn state and its running turn (0: none)."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} (session_id TEXT PRIMARY KEY,"
            " state TEXT NOT NULL, running INTEGER NOT NULL)"
        ]

    def indexes(self) -> list[str]:
        """None: the table is only ever as big as the pending turn work."""
        return []

    def apply(self, conn: apsw.Connection, change: Change) -> None:
        """Nothing per event: ``settle`` writes from the folded state."""

    def settle(self, conn: apsw.Connection, states: dict[str, SessionState]) -> None:
        """Add or update the row of each touched session with turn work; drop it once idle.

        A session no gateway ever admitted a turn to never has a row, so embedded writes pay
        nothing here.
        """
        upserts: list[tuple[str, str, int]] = []
        deletes: list[tuple[str]] = []
        for sid, state in states.items():
            turn_state = state.turn_state
            if turn_state:
                upserts.append((sid, turn_state, state.turn_running))
            elif state.turns_admitted:  # a replay settles in chunks: it may have a row
                deletes.append((sid,))
        # One row per session, so the order between sessions is free: one statement each.
        if upserts:
            conn.executemany(self._upsert, upserts)
        if deletes:
            conn.executemany(self._delete, deletes)

    def forget(self, conn: apsw.Connection, session_id: str) -> None:
        """Remove a deleted session's row."""
        conn.execute(self._delete, (session_id,))


def fill(conn: apsw.Connection) -> None:
    """Layout 9: build the table from the stored heads (once, at the upgrade)."""
    from hermes_es.aggregates.state import decode_state

    projector = TurnWorkProjector()
    for statement in projector.schema():
        conn.execute(statement)
    for (blob,) in conn.execute("SELECT head FROM sessions").fetchall():
        state = decode_state(blob)
        if state.turn_state:
            conn.execute(
                projector._upsert, (state.session_id, state.turn_state, state.turn_running)
            )
