"""The full-text index over message content (FTS5, external content, ``hermes`` tokenizer)."""

from __future__ import annotations

from collections.abc import Sequence

import apsw

from hermes_es import events as ev
from hermes_es.aggregates.state import SessionState
from hermes_es.aggregates.validation import content_text
from hermes_es.projections.base import Change, ReplayRaced, message_row_id
from hermes_es.projections.fts import (
    create_fts_sql,
    fill_options,
    live_options,
    merge_step,
    upkeep_step,
)


def new_messages(e: ev.Event) -> list[ev.Message]:
    """The message rows an event stores (appends, edits, turns, imports, summaries)."""
    if isinstance(e, ev.MessageAppended | ev.MessageEdited):
        return [e.message]
    if isinstance(e, ev.TurnAppended | ev.HistoryImported):
        return e.messages
    if isinstance(e, ev.CompactedInPlace):
        return e.summary
    return []


class SearchProjector:
    """Indexes every stored message row; rows are only ever added or physically deleted."""

    name = "search"
    deferrable = True
    """A group commit may write this projector's rows at the end of the group (they are
    derived from the events alone and only ever added): ``ProjectionSet.deferred_index``."""

    def __init__(self, prefix: str = "", *, bulk: bool = False) -> None:
        self.p = prefix
        self.table = f"{prefix}messages_fts"
        self._insert = f"INSERT INTO {self.table} (rowid, content) VALUES (?, ?)"
        self._bulk = bulk

    def tables(self) -> list[str]:
        """Table names (the FTS5 virtual table)."""
        return [self.table]

    def schema(self) -> list[str]:
        """The FTS table points at ``messages`` even while rebuilding under a prefix."""
        return [create_fts_sql(self.table, "messages", "id")]

    def indexes(self) -> list[str]:
        """None beyond the FTS index itself."""
        return []

    def apply(self, conn: apsw.Connection, change: Change) -> None:
        """Index the text of every message the event adds."""
        messages = new_messages(change.event)
        if len(messages) == 1:
            conn.execute(
                self._insert,
                (message_row_id(change.position, 0), content_text(messages[0].content)),
            )
        elif messages:
            conn.executemany(
                self._insert,
                [
                    (message_row_id(change.position, i), content_text(m.content))
                    for i, m in enumerate(messages)
                ],
            )
        if messages and not self._bulk:
            upkeep_step(conn, self.table)

    def apply_batch(self, conn: apsw.Connection, changes: Sequence[Change]) -> None:
        """Index the messages of many events with one ``executemany`` (rows are only added)."""
        rows = [
            (message_row_id(change.position, i), content_text(m.content))
            for change in changes
            for i, m in enumerate(new_messages(change.event))
        ]
        if rows:
            conn.executemany(self._insert, rows)
            if not self._bulk:
                upkeep_step(conn, self.table)

    def begin_fill(self, conn: apsw.Connection) -> None:
        """The index is about to be filled from nothing (a rebuild): its segments wait to be
        merged until ``merge_fill`` (``fts.FILL_OPTIONS``)."""
        fill_options(conn, self.table)

    def merge_fill(self, conn: apsw.Connection) -> bool:
        """One bounded step of merging a filled index into one segment; False when done."""
        return merge_step(conn, self.table)

    def end_fill(self, conn: apsw.Connection) -> None:
        """Later rows are merged as FTS5 merges them by default (``fts.LIVE_OPTIONS``)."""
        live_options(conn, self.table)

    def settle(self, conn: apsw.Connection, states: dict[str, SessionState]) -> None:
        """Nothing per session."""

    def forget(self, conn: apsw.Connection, session_id: str) -> None:
        """Remove the session's index entries (run before its message rows and events go).

        The text each entry was made from is read back from the session's events, still in
        the log at this point of a delete. A replay (``bulk``) meets a delete only after the
        events are gone: if it indexed any of that session's rows, it raises ``ReplayRaced``.
        """
        if self._bulk:
            rows = conn.execute(
                f"SELECT 1 FROM {self.p}message_rows WHERE session_id = ? LIMIT 1", (session_id,)
            ).fetchall()
            if rows:
                raise ReplayRaced(session_id)
            return
        conn.execute(
            f"INSERT INTO {self.table} ({self.table}, rowid, content)"
            f" SELECT 'delete', id, content FROM {self.p}messages WHERE session_id = ?",
            (session_id,),
        )
