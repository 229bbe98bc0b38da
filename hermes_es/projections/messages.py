"""The ``messages`` read model: every message ever stored, with its state and display order.

``state`` is active, rewound, edited or compacted; ``imported`` marks rows restored from a
backup (archived history, never live context). ``ord`` is the stable display order: a message
appended normally gets its sequence number, an edit replacement takes the place of the message
it replaced, and compaction summaries sit between the archived messages and the kept tail.
"""

from __future__ import annotations

from collections.abc import Sequence

import apsw
import msgspec

from hermes_es import events as ev
from hermes_es.aggregates.state import SessionState
from hermes_es.aggregates.validation import content_text
from hermes_es.projections.base import Change, message_row_id

_JSON = msgspec.json.Encoder()

_MESSAGE_CHANGES = (ev.MessageEdited, ev.RewoundTo, ev.CompactedInPlace, ev.HistoryImported)
"""Events other than appends that change ``messages`` rows."""

COLUMNS = (
    "id", "session_id", "seq", "ord", "uid", "role", "content", "parts", "tool_calls",
    "tool_call_id", "tool_name", "reasoning", "tokens_in", "tokens_out", "media",
    "finish_reason", "at", "state", "imported", "version", "reasoning_content", "token_count",
)  # fmt: skip


def message_row(
    change: Change, index: int, message: ev.Message, ord_: float, state: str, imported: int
) -> tuple[object, ...]:
    """The messages row for one stored message."""
    parts = None if isinstance(message.content, str) else _JSON.encode(message.content).decode()
    calls = _JSON.encode(message.tool_calls).decode() if message.tool_calls else None
    media = _JSON.encode(message.media).decode() if message.media else None
    return (
        message_row_id(change.position, index), change.stream, message.seq, ord_, message.uid,
        message.role, content_text(message.content), parts, calls, message.tool_call_id,
        message.tool_name, message.reasoning, message.tokens_in, message.tokens_out, media,
        message.finish_reason, message.at, state, imported, change.version,
        message.reasoning_content, message.token_count,
    )  # fmt: skip


class MessagesProjector:
    """Maintains ``messages``."""

    name = "messages"

    def __init__(self, prefix: str = "") -> None:
        self.p = prefix
        t = f"{prefix}messages"
        self.table = t
        self._insert = (
            f"INSERT INTO {t} ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
        )
        self._set_state = f"UPDATE {t} SET state = ? WHERE session_id = ? AND seq = ?"
        self._ord_of = f"SELECT ord FROM {t} WHERE session_id = ? AND seq = ?"
        self._next_ord = (
            f"SELECT MIN(ord) FROM {t} WHERE session_id = ? AND ord > ? AND state = 'active'"
            " AND imported = 0"
        )

    def tables(self) -> list[str]:
        """Table names."""
        return [self.table]

    def schema(self) -> list[str]:
        """The messages table (indexes come separately, after bulk loads)."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            " id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, seq INTEGER NOT NULL,"
            " ord REAL NOT NULL, uid TEXT NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,"
            " parts TEXT, tool_calls TEXT, tool_call_id TEXT, tool_name TEXT, reasoning TEXT,"
            " tokens_in INTEGER NOT NULL, tokens_out INTEGER NOT NULL, media TEXT,"
            " finish_reason TEXT, at REAL NOT NULL, state TEXT NOT NULL,"
            " imported INTEGER NOT NULL, version INTEGER NOT NULL, reasoning_content TEXT,"
            " token_count INTEGER)"
        ]

    def indexes(self) -> list[str]:
        """Lookup by (session, seq), by uid, and display order."""
        return [
            "CREATE UNIQUE INDEX IF NOT EXISTS messages_seq ON messages (session_id, seq)",
            "CREATE INDEX IF NOT EXISTS messages_uid ON messages (session_id, uid)",
            "CREATE INDEX IF NOT EXISTS messages_ord ON messages (session_id, ord, seq)",
        ]

    def _ord(self, conn: apsw.Connection, session_id: str, seq: int) -> float:
        rows = conn.execute(self._ord_of, (session_id, seq)).fetchall()
        return float(rows[0][0]) if rows else float(seq)

    def apply(self, conn: apsw.Connection, change: Change) -> None:
        """Insert new rows and move replaced, rewound or compacted ones out of the context."""
        e = change.event
        sid = change.stream
        if isinstance(e, ev.MessageAppended):
            m = e.message
            conn.execute(self._insert, message_row(change, 0, m, float(m.seq), "active", 0))
        elif isinstance(e, ev.TurnAppended):
            conn.executemany(
                self._insert,
                [
                    message_row(change, i, m, float(m.seq), "active", 0)
                    for i, m in enumerate(e.messages)
                ],
            )
        elif isinstance(e, ev.MessageEdited):
            ord_ = self._ord(conn, sid, e.target_seq)
            conn.execute(self._set_state, ("edited", sid, e.target_seq))
            conn.execute(self._insert, message_row(change, 0, e.message, ord_, "active", 0))
        elif isinstance(e, ev.RewoundTo):
            conn.executemany(self._set_state, [("rewound", sid, s) for s in e.removed])
        elif isinstance(e, ev.CompactedInPlace):
            self._compact(conn, change, e)
        elif isinstance(e, ev.HistoryImported):
            imported = 0 if e.live else 1
            conn.executemany(
                self._insert,
                [
                    message_row(change, i, m, float(m.seq), st, imported)
                    for i, (m, st) in enumerate(zip(e.messages, e.states, strict=True))
                ],
            )

    def apply_batch(self, conn: apsw.Connection, changes: Sequence[Change]) -> None:
        """Apply events in order, inserting runs of appended messages with one ``executemany``.

        Pending inserts are written before any event that reads or updates earlier rows.
        """
        rows: list[tuple[object, ...]] = []
        for change in changes:
            e = change.event
            if isinstance(e, ev.MessageAppended):
                m = e.message
                rows.append(message_row(change, 0, m, float(m.seq), "active", 0))
            elif isinstance(e, ev.TurnAppended):
                rows += [
                    message_row(change, i, m, float(m.seq), "active", 0)
                    for i, m in enumerate(e.messages)
                ]
            elif isinstance(e, _MESSAGE_CHANGES):
                if rows:
                    conn.executemany(self._insert, rows)
                    rows = []
                self.apply(conn, change)
        if rows:
            conn.executemany(self._insert, rows)

    def _compact(self, conn: apsw.Connection, change: Change, e: ev.CompactedInPlace) -> None:
        sid = change.stream
        lo = max(self._ord(conn, sid, s) for s in e.archived)
        conn.executemany(self._set_state, [("compacted", sid, s) for s in e.archived])
        rows = conn.execute(self._next_ord, (sid, lo)).fetchall()
        hi = float(rows[0][0]) if rows and rows[0][0] is not None else lo + 1.0
        k = len(e.summary)
        conn.executemany(
            self._insert,
            [
                message_row(change, i, m, lo + (hi - lo) * (i + 1) / (k + 1), "active", 0)
                for i, m in enumerate(e.summary)
            ],
        )

    def settle(self, conn: apsw.Connection, states: dict[str, SessionState]) -> None:
        """Nothing per session."""

    def forget(self, conn: apsw.Connection, session_id: str) -> None:
        """Remove the session's messages."""
        conn.execute(f"DELETE FROM {self.table} WHERE session_id = ?", (session_id,))
