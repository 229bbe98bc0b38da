"""The ``turn_submissions`` read model: the client submission ids of each session's last turns.

A session admits a submission id once (``prompt.submit`` is idempotent), remembering the ids
of its last ``RECENT_SUBMISSIONS`` admitted turns. The folded state keeps that window
(``SessionState.recent_submissions``), but the stored head does not: at 256 ids it was 10 KB of
a session's row, encoded and rewritten with every write of the session. Here each admission
adds one row and drops the one that left the window, and a head loaded for an admission gets
its window back from these rows (``with_submissions``; ``queries.turns.admitted_as`` reads one
id). The table therefore holds exactly the
window of every session, whether written turn by turn or replayed from the log.
"""

from __future__ import annotations

import apsw
import msgspec

from hermes_es import events as ev
from hermes_es.aggregates.state import RECENT_SUBMISSIONS, SessionState
from hermes_es.projections.base import Change

TABLE = "turn_submissions"

RECENT_SQL = (
    f"SELECT submission_id, turn FROM {TABLE} WHERE session_id = ? ORDER BY turn DESC LIMIT ?"
)


class TurnSubmissionsProjector:
    """Keeps ``turn_submissions`` equal to the last admissions of every session."""

    name = "turn_submissions"
    applies_to: tuple[type, ...] = (ev.TurnAdmitted,)
    """The events ``apply`` reacts to (``ProjectionSet`` calls it for no other)."""

    def __init__(self, prefix: str = "") -> None:
        self.p = prefix
        self.table = f"{prefix}{TABLE}"
        self._insert = (
            f"INSERT INTO {self.table} (session_id, turn, submission_id) VALUES (?, ?, ?)"
        )
        self._drop_old = f"DELETE FROM {self.table} WHERE session_id = ? AND turn <= ?"
        self._delete = f"DELETE FROM {self.table} WHERE session_id = ?"

    def tables(self) -> list[str]:
        """Table names."""
        return [self.table]

    def schema(self) -> list[str]:
        """One row per remembered admission, clustered by session and turn."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} (session_id TEXT NOT NULL,"
            " turn INTEGER NOT NULL, submission_id TEXT NOT NULL,"
            " PRIMARY KEY (session_id, turn)) WITHOUT ROWID"
        ]

    def indexes(self) -> list[str]:
        """None: the primary key serves the one read (a session's newest turns)."""
        return []

    def apply(self, conn: apsw.Connection, change: Change) -> None:
        """Remember an admission; forget the one that falls out of the window."""
        e = change.event
        if isinstance(e, ev.TurnAdmitted):
            conn.execute(self._insert, (change.stream, e.turn, e.submission_id))
            if e.turn > RECENT_SUBMISSIONS:
                conn.execute(self._drop_old, (change.stream, e.turn - RECENT_SUBMISSIONS))

    def settle(self, conn: apsw.Connection, states: dict[str, SessionState]) -> None:
        """Nothing per session: ``apply`` wrote the rows."""

    def forget(self, conn: apsw.Connection, session_id: str) -> None:
        """Remove a deleted session's rows."""
        conn.execute(self._delete, (session_id,))


def recent(conn: apsw.Connection, session_id: str) -> dict[str, int]:
    """The session's remembered submission ids and their turns, oldest first."""
    rows = conn.execute(RECENT_SQL, (session_id, RECENT_SUBMISSIONS)).fetchall()
    return {str(sub): int(turn) for sub, turn in reversed(rows)}


def with_submissions(conn: apsw.Connection, state: SessionState) -> SessionState:
    """A head just decoded, with its submission window read back (sessions a gateway never
    admitted a turn to have none: no read)."""
    if state.turns_admitted:
        state.recent_submissions = recent(conn, state.session_id)
    return state


class _LegacyWindow(msgspec.Struct):
    """What a head of layout 11 or before held of the window (its other fields ignored)."""

    recent_submissions: list[tuple[str, int]] = []


def fill(conn: apsw.Connection, projector: TurnSubmissionsProjector | None = None) -> None:
    """Layout 12: the table from the heads' own windows (heads of layout 11 and before carry
    them, as a list of pairs), and the heads re-encoded without them (the same bytes as a
    head written now: the head's other fields keep their order). No replay. ``projector``:
    another backend's (its DDL)."""
    projector = projector or TurnSubmissionsProjector()
    for statement in projector.schema():
        conn.execute(statement)
    legacy = msgspec.msgpack.Decoder(_LegacyWindow)
    for sid, blob in conn.execute("SELECT id, head FROM sessions").fetchall():
        window = legacy.decode(blob).recent_submissions
        if not window:
            continue
        conn.executemany(projector._insert, [(sid, turn, sub) for sub, turn in window])
        fields = msgspec.msgpack.decode(blob)
        del fields["recent_submissions"]
        conn.execute(
            "UPDATE sessions SET head = ? WHERE id = ?", (msgspec.msgpack.encode(fields), sid)
        )
