"""The ``messages`` read model: every message ever stored, with its state and display order.

``state`` is active, rewound, edited or compacted; ``imported`` marks rows restored from a
backup (archived history, never live context). ``ord`` is the stable display order: a message
appended normally gets its sequence number, an edit replacement takes the place of the message
it replaced, and compaction summaries sit between the archived messages and the kept tail.

The text of a message is not copied into the projections: it is in the event that stored it
(compressed). ``message_rows`` holds every other column; the ``messages`` view adds ``content``,
read from the event through ``hermes_message_text`` (``hermes_es.store.message_text``). Rows
stay addressable that way: a row id is ``position * 4096 + index`` (``message_row_id``).
A projector built with ``text_in_rows`` keeps the text in its own ``messages`` table instead
(PostgreSQL, and the scratch table of a time-travel read, whose log is not beside it).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import apsw
import msgspec

from hermes_es import events as ev
from hermes_es.aggregates.session import UID_LENGTH
from hermes_es.aggregates.state import SessionState
from hermes_es.aggregates.validation import content_text
from hermes_es.projections.base import MESSAGE_ID_SHIFT, Change, message_row_id
from hermes_es.store.message_text import FUNCTION as TEXT_FUNCTION

_JSON = msgspec.json.Encoder()

_MESSAGE_CHANGES = (ev.MessageEdited, ev.RewoundTo, ev.CompactedInPlace, ev.HistoryImported)
"""Events other than appends that change ``messages`` rows."""

COLUMNS = (
    "id", "session_id", "seq", "ord", "uid", "role", "content", "parts", "tool_calls",
    "tool_call_id", "tool_name", "reasoning", "tokens_in", "tokens_out", "media",
    "finish_reason", "at", "state", "imported", "version", "reasoning_content", "token_count",
)  # fmt: skip
"""Columns of ``messages`` (the view, or a table that keeps the text), in row order."""
TEXT_INDEX = COLUMNS.index("content")
ROW_COLUMNS = tuple(c for c in COLUMNS if c != "content")
"""Columns of ``message_rows``: every column but the text."""

ROWS_TABLE = "message_rows"
VIEW = "messages"

GENERATED_UID_LENGTH = UID_LENGTH
"""Length of a uid hermes generates (``hermes_es.aggregates.session.new_uid``). Only uids of
another length are in the ``messages_uid`` index: a generated uid is never retried by a client,
so looking one up (``queries.lookup.seqs_for_uids``) may read the session's rows instead."""

_TABLE_SQL = (
    "CREATE TABLE IF NOT EXISTS {table} ("
    " id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " ord REAL NOT NULL, uid TEXT NOT NULL, role TEXT NOT NULL,{content}"
    " parts TEXT, tool_calls TEXT, tool_call_id TEXT, tool_name TEXT, reasoning TEXT,"
    " tokens_in INTEGER NOT NULL, tokens_out INTEGER NOT NULL, media TEXT,"
    " finish_reason TEXT, at REAL NOT NULL, state TEXT NOT NULL,"
    " imported INTEGER NOT NULL, version INTEGER NOT NULL, reasoning_content TEXT,"
    " token_count INTEGER)"
)


def text_table_sql(table: str = VIEW) -> str:
    """DDL of a messages table that keeps the text (PostgreSQL, scratch replays, floors)."""
    return _TABLE_SQL.format(table=table, content=" content TEXT NOT NULL,")


def view_sql() -> str:
    """The ``messages`` view: ``message_rows`` plus ``content`` read from the storing event."""
    text = (
        f"(SELECT {TEXT_FUNCTION}(e.id, e.originator_id, e.originator_version, e.topic,"
        f" e.state, r.id % {MESSAGE_ID_SHIFT})"
        f" FROM events e WHERE e.id = r.id / {MESSAGE_ID_SHIFT}) AS content"
    )
    cols = ", ".join(text if c == "content" else f"r.{c} AS {c}" for c in COLUMNS)
    return f"CREATE VIEW IF NOT EXISTS {VIEW} AS SELECT {cols} FROM {ROWS_TABLE} r"


def message_row(
    change: Change,
    index: int,
    message: ev.Message,
    ord_: float,
    state: str,
    imported: int,
    *,
    with_text: bool = True,
) -> tuple[object, ...]:
    """The ``messages`` row for one stored message; ``with_text=False`` gives the
    ``message_rows`` row, whose text stays in the event (the view reads it from there)."""
    parts = None if isinstance(message.content, str) else _JSON.encode(message.content).decode()
    calls = _JSON.encode(message.tool_calls).decode() if message.tool_calls else None
    media = _JSON.encode(message.media).decode() if message.media else None
    key = (message_row_id(change.position, index), change.stream, message.seq, ord_, message.uid,
           message.role)  # fmt: skip
    text = (content_text(message.content),) if with_text else ()
    return key + text + (
        parts, calls, message.tool_call_id,
        message.tool_name, message.reasoning, message.tokens_in, message.tokens_out, media,
        message.finish_reason, message.at, state, imported, change.version,
        message.reasoning_content, message.token_count,
    )  # fmt: skip


_BY_SEQ = (
    "SELECT {col} FROM {t} WHERE session_id = ? AND ord = ? AND seq = ?"
    " UNION ALL SELECT {col} FROM {t} WHERE session_id = ? AND seq = ? AND ord <> seq"
)
"""One message row by (session, seq) through ``messages_ord`` and ``messages_moved``;
parameters ``by_seq_args``."""


def by_seq_args(session_id: str, seq: int) -> tuple[str, int, int, str, int]:
    """The parameters of a (session, seq) lookup written with ``_BY_SEQ``."""
    return (session_id, seq, seq, session_id, seq)


class MessagesProjector:
    """Maintains ``messages``."""

    name = "messages"
    moved_index = True
    """Rows are found by (session, seq) through ``messages_ord`` and the small
    ``messages_moved`` index (layout 10): an append writes two per-session index entries, not
    three. False: a full unique ``messages_seq`` index (PostgreSQL keeps it)."""

    def __init__(self, prefix: str = "", *, text_in_rows: bool = False) -> None:
        self.p = prefix
        self.text_in_rows = text_in_rows
        t = f"{prefix}{VIEW if text_in_rows else ROWS_TABLE}"
        self.table = t
        cols = COLUMNS if text_in_rows else ROW_COLUMNS
        self._row = functools.partial(message_row, with_text=text_in_rows)
        self._insert = f"INSERT INTO {t} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        if self.moved_index:
            # One row by (session, seq) without a (session, seq) index: a row in its own
            # place (ord = seq, nearly every row) is one ``messages_ord`` key; a moved one
            # (an edit's replacement, a compaction summary) is in ``messages_moved``.
            self._set_state = (
                f"UPDATE {t} SET state = ? WHERE id IN ({_BY_SEQ.format(col='id', t=t)})"
            )
            self._ord_of = _BY_SEQ.format(col="ord", t=t)
        else:
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
        """The rows table, and the ``messages`` view over it (indexes come after bulk loads)."""
        if self.text_in_rows:
            return [text_table_sql(self.table)]
        return [_TABLE_SQL.format(table=self.table, content=""), view_sql()]

    def indexes(self) -> list[str]:
        """Lookup by (session, seq) of a moved row (``moved_index``), by a client-supplied uid,
        and display order (which also finds a row in its place by (session, seq))."""
        t = VIEW if self.text_in_rows else ROWS_TABLE
        by_seq = (
            f"CREATE INDEX IF NOT EXISTS messages_moved ON {t} (session_id, seq, ord)"
            " WHERE ord <> seq"
            if self.moved_index
            else f"CREATE UNIQUE INDEX IF NOT EXISTS messages_seq ON {t} (session_id, seq)"
        )
        return [
            by_seq,
            f"CREATE INDEX IF NOT EXISTS messages_uid ON {t} (session_id, uid)"
            f" WHERE length(uid) <> {GENERATED_UID_LENGTH}",
            f"CREATE INDEX IF NOT EXISTS messages_ord ON {t} (session_id, ord, seq)",
        ]

    def _by_seq(self, session_id: str, seq: int) -> tuple[object, ...]:
        return by_seq_args(session_id, seq) if self.moved_index else (session_id, seq)

    def _ord(self, conn: apsw.Connection, session_id: str, seq: int) -> float:
        rows = conn.execute(self._ord_of, self._by_seq(session_id, seq)).fetchall()
        return float(rows[0][0]) if rows else float(seq)

    def apply(self, conn: apsw.Connection, change: Change) -> None:
        """Insert new rows and move replaced, rewound or compacted ones out of the context."""
        e = change.event
        sid = change.stream
        if isinstance(e, ev.MessageAppended):
            m = e.message
            conn.execute(self._insert, self._row(change, 0, m, float(m.seq), "active", 0))
        elif isinstance(e, ev.TurnAppended):
            conn.executemany(
                self._insert,
                [
                    self._row(change, i, m, float(m.seq), "active", 0)
                    for i, m in enumerate(e.messages)
                ],
            )
        elif isinstance(e, ev.MessageEdited):
            ord_ = self._ord(conn, sid, e.target_seq)
            conn.execute(self._set_state, ("edited", *self._by_seq(sid, e.target_seq)))
            conn.execute(self._insert, self._row(change, 0, e.message, ord_, "active", 0))
        elif isinstance(e, ev.RewoundTo):
            conn.executemany(
                self._set_state, [("rewound", *self._by_seq(sid, s)) for s in e.removed]
            )
        elif isinstance(e, ev.CompactedInPlace):
            self._compact(conn, change, e)
        elif isinstance(e, ev.HistoryImported):
            imported = 0 if e.live else 1
            conn.executemany(
                self._insert,
                [
                    self._row(change, i, m, float(m.seq), st, imported)
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
                rows.append(self._row(change, 0, m, float(m.seq), "active", 0))
            elif isinstance(e, ev.TurnAppended):
                rows += [
                    self._row(change, i, m, float(m.seq), "active", 0)
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
        conn.executemany(
            self._set_state, [("compacted", *self._by_seq(sid, s)) for s in e.archived]
        )
        rows = conn.execute(self._next_ord, (sid, lo)).fetchall()
        hi = float(rows[0][0]) if rows and rows[0][0] is not None else lo + 1.0
        k = len(e.summary)
        conn.executemany(
            self._insert,
            [
                self._row(change, i, m, lo + (hi - lo) * (i + 1) / (k + 1), "active", 0)
                for i, m in enumerate(e.summary)
            ],
        )

    def settle(self, conn: apsw.Connection, states: dict[str, SessionState]) -> None:
        """Nothing per session."""

    def forget(self, conn: apsw.Connection, session_id: str) -> None:
        """Remove the session's messages."""
        conn.execute(f"DELETE FROM {self.table} WHERE session_id = ?", (session_id,))
