"""Every read model, applied together in the transaction that stores the events."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import apsw

from hermes_es.aggregates.state import SessionState
from hermes_es.projections.base import Change, Projector
from hermes_es.projections.fts import register_tokenizer
from hermes_es.projections.lineage import LineageProjector
from hermes_es.projections.messages import MessagesProjector
from hermes_es.projections.prompts import PromptsProjector
from hermes_es.projections.receipts import ReceiptsProjector
from hermes_es.projections.search import SearchProjector
from hermes_es.projections.sessions import SessionsProjector
from hermes_es.projections.submissions import TurnSubmissionsProjector
from hermes_es.projections.turn_work import TurnWorkProjector
from hermes_es.store.db import open_db, write_transaction
from hermes_es.store.schema import EVENTS_SCHEMA

TRACKING_NAME = "projections"
"""Reader name under which the projections' log position is tracked."""

SCHEMA_VERSION = 12
"""Projection layout: 1 first; 2 head state in the sessions row; 3 FTS prefix index (2, 3);
4 platform, chat_id, model_config, launch_flags columns in sessions (docs/schema.md);
5 messages keep reasoning_content and token_count; 6 ``sessions_last_active`` index
(sessions list at 100,000 sessions); 7 head state with the turn lifecycle fields (a gateway's
queue, running and unknown turns: older heads are re-encoded, no replay); 8 message text
only in the log (``message_rows`` + the ``messages`` view), shorter generated uids, the uid
index only for client-supplied uids; 9 ``turn_work`` (sessions with gateway turns pending)
and the ``sessions_open`` index, so a gateway's start-up reads neither every head nor every
row (built from the heads once, no replay); 10 ``messages_seq`` dropped: rows in their place
(ord = seq) are found by (session, seq) through ``messages_ord``, the moved ones through the
partial ``messages_moved`` index (an index swap, no replay); 11 identifier tokens in the
full-text index (``projections/fts.py``, ``with_identifiers``: FTS5 re-reads the message text
once, no replay); 12 ``turn_submissions`` (each session's last admitted submission ids, out of
the head: filled from the heads, which are re-encoded without them, no replay)."""


def _add_indexes(conn: apsw.Connection) -> None:
    ProjectionSet().create_indexes(conn)


def _reencode_heads(conn: apsw.Connection) -> None:
    """Layout 7: heads gained the turn fields (with defaults); an old head decodes into exactly
    what a replay would fold, so re-encoding it is the whole upgrade."""
    from hermes_es.aggregates.state import decode_state, encode_state

    rows = conn.execute("SELECT id, head FROM sessions").fetchall()
    for sid, head in rows:
        conn.execute(
            "UPDATE sessions SET head = ? WHERE id = ?", (encode_state(decode_state(head)), sid)
        )


def _add_turn_work(conn: apsw.Connection) -> None:
    """Layout 9: the ``turn_work`` table filled from the heads, and the new index."""
    from hermes_es.projections.turn_work import fill

    fill(conn)
    _add_indexes(conn)


def _add_turn_submissions(conn: apsw.Connection) -> None:
    """Layout 12: ``turn_submissions`` filled from the heads, the heads re-encoded without
    their submission windows."""
    from hermes_es.projections.submissions import fill

    fill(conn)


def _drop_seq_index(conn: apsw.Connection) -> None:
    """Layout 10: the unique (session, seq) index gives way to ``messages_moved`` (only the
    rows whose ord is not their seq: a scan of the rows, no replay)."""
    conn.execute("DROP INDEX IF EXISTS messages_seq")
    _add_indexes(conn)


UPGRADE_PROGRESS_MIN = 50_000
"""Message rows from which an upgrade that reads every message reports progress on stderr."""

REINDEX_BATCH = 20_000
"""Message rows indexed again between two progress reports of the layout-11 upgrade."""


def upgrade_progress(what: str, total: int) -> Callable[[int], None]:
    """A reporter of ``done`` out of ``total`` for an upgrade run on open: a line on stderr
    at most every 2 seconds and at the end, for stores of ``UPGRADE_PROGRESS_MIN`` rows or
    more (nothing for small stores). An upgrade runs once, inside the opening transaction."""
    if total < UPGRADE_PROGRESS_MIN:
        return lambda done: None
    last = [0.0]

    def report(done: int) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < 2.0:
            return
        last[0] = now
        sys.stderr.write(f"hermes: {what}: {done:,} of {total:,} messages\n")
        sys.stderr.flush()

    sys.stderr.write(f"hermes: {what}, once, {total:,} messages\n")
    return report


def _reindex_fts(conn: apsw.Connection) -> None:
    """Layout 11: the full-text index gained identifier tokens. The index is emptied and
    every message row's text indexed again in id order, ``REINDEX_BATCH`` rows at a time (read
    from the log through the ``messages`` view, the rows the index already covered, as FTS5's
    own ``rebuild`` would), with progress; no replay of the projections."""
    total = conn.execute("SELECT count(*) FROM message_rows").fetchall()[0][0]
    report = upgrade_progress("re-indexing the message text for search (layout 11)", total)
    conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('delete-all')")
    low, done = -1, 0
    while True:
        count, high = conn.execute(
            "SELECT count(*), max(id) FROM"
            " (SELECT id FROM message_rows WHERE id > ? ORDER BY id LIMIT ?)",
            (low, REINDEX_BATCH),
        ).fetchall()[0]
        if not count:
            break
        conn.execute(
            "INSERT INTO messages_fts(rowid, content)"
            " SELECT id, content FROM messages WHERE id > ? AND id <= ? ORDER BY id",
            (low, high),
        )
        low, done = high, done + count
        report(done)


UPGRADES: dict[int, Callable[[apsw.Connection], None]] = {
    5: _add_indexes,
    6: _reencode_heads,
    8: _add_turn_work,
    9: _drop_seq_index,
    10: _reindex_fts,
    11: _add_turn_submissions,
}
"""Layout upgrades that need no replay: from the key's version to the next one."""


class ProjectionSet:
    """The projectors of one generation of tables (live, or a rebuild under a prefix)."""

    def __init__(self, prefix: str = "", *, bulk: bool = False) -> None:
        """``bulk``: a replay into fresh tables (rows only added), not the live append path."""
        self.prefix = prefix
        self.projectors: list[Projector] = self.make_projectors(prefix, bulk=bulk)
        # Bound methods looked up once: ``apply`` runs for every write transaction.
        # Projectors are independent of each other, so the order they run in is free.
        self._batch_appliers: list[Callable[[apsw.Connection, Sequence[Change]], None]] = []
        self._appliers: list[
            tuple[tuple[type, ...] | None, Callable[[apsw.Connection, Change], None]]
        ] = []
        """Per-event ``apply`` of the projectors without ``apply_batch``, with the event types
        each reacts to (``applies_to``; None: every type)."""
        self._by_type: dict[type, list[Callable[[apsw.Connection, Change], None]]] = {}
        self._settlers: list[Callable[[apsw.Connection, dict[str, SessionState]], None]] = []
        self._index_appliers: list[Callable[[apsw.Connection, Sequence[Change]], None]] = []
        """``apply_batch`` of the projectors a group commit may defer (the full-text index)."""
        self._eager_batch_appliers: list[Callable[[apsw.Connection, Sequence[Change]], None]] = []
        self._local = threading.local()
        for projector in self.projectors:
            apply_batch = getattr(projector, "apply_batch", None)
            if apply_batch is not None:
                self._batch_appliers.append(apply_batch)
                if getattr(projector, "deferrable", False):
                    self._index_appliers.append(apply_batch)
                else:
                    self._eager_batch_appliers.append(apply_batch)
            else:
                self._appliers.append((getattr(projector, "applies_to", None), projector.apply))
            if isinstance(projector, SessionsProjector):
                self._sessions = projector
            else:
                self._settlers.append(projector.settle)

    def make_projectors(self, prefix: str, *, bulk: bool) -> list[Projector]:
        """The read models of this set (another backend's set returns its own)."""
        return [
            SessionsProjector(prefix),
            MessagesProjector(prefix),  # before search: bulk indexing reads its rows
            SearchProjector(prefix, bulk=bulk),
            LineageProjector(prefix),
            PromptsProjector(prefix),
            ReceiptsProjector(prefix),
            TurnWorkProjector(prefix),
            TurnSubmissionsProjector(prefix),
        ]

    def tables(self) -> list[str]:
        """Every table this set maintains."""
        return [t for p in self.projectors for t in p.tables()]

    def drop_views(self, conn: apsw.Connection) -> None:
        """Drop the views over this set's tables (before the tables are dropped or renamed)."""
        rows = conn.execute("SELECT name FROM sqlite_schema WHERE type = 'view'").fetchall()
        for (name,) in rows:
            conn.execute(f'DROP VIEW IF EXISTS "{name}"')

    def create_views(self, conn: apsw.Connection) -> None:
        """Create the views again (after a rebuild swapped the tables in)."""
        for projector in self.projectors:
            for statement in projector.schema():
                if statement.startswith("CREATE VIEW"):
                    conn.execute(statement)

    def create(self, conn: apsw.Connection, *, with_indexes: bool = True) -> None:
        """Create the tables (and, unless bulk loading, their indexes)."""
        for projector in self.projectors:
            for statement in projector.schema():
                conn.execute(statement)
            if with_indexes:
                self.create_indexes(conn, projector)

    def begin_fill(self, conn: apsw.Connection) -> None:
        """The tables were just created and a replay is about to fill them (a rebuild): the
        projectors that write differently into a table being filled from nothing say so
        (the full-text index defers its merges, ``SearchProjector.begin_fill``)."""
        for projector in self.projectors:
            begin = getattr(projector, "begin_fill", None)
            if begin is not None:
                begin(conn)

    def merge_fill(self, conn: apsw.Connection) -> bool:
        """One bounded step of what a fill left to do (merging the index's segments), in the
        caller's transaction; False once nothing is left. Call it until False, then
        ``end_fill``."""
        more = False
        for projector in self.projectors:
            merge = getattr(projector, "merge_fill", None)
            if merge is not None:
                more = merge(conn) or more
        return more

    def end_fill(self, conn: apsw.Connection) -> None:
        """The fill is over: later writes go as on live tables (``SearchProjector.end_fill``)."""
        for projector in self.projectors:
            end = getattr(projector, "end_fill", None)
            if end is not None:
                end(conn)

    def create_indexes(self, conn: apsw.Connection, projector: Projector | None = None) -> None:
        """Create secondary indexes (canonical names; only valid for unprefixed tables)."""
        for p in [projector] if projector else self.projectors:
            for statement in p.indexes():
                conn.execute(statement)

    def apply(
        self,
        conn: apsw.Connection,
        changes: Sequence[Change],
        states: dict[str, SessionState],
        before: Mapping[str, SessionState] | None = None,
    ) -> None:
        """Apply a batch of stored events and settle the touched sessions.

        ``before`` (the touched sessions' states as loaded, i.e. as their rows stand) lets the
        sessions projector update only what changed without reading the rows first.

        Projectors are independent of each other, so each one takes the whole batch in turn;
        one with an ``apply_batch`` method (bulk inserts) gets the batch in a single call.
        """
        deferred: list[Change | str] | None = getattr(self._local, "deferred", None)
        if deferred is None:
            for apply_batch in self._batch_appliers:
                apply_batch(conn, changes)
        else:  # a group commit: the index rows wait for the end of the group
            for apply_batch in self._eager_batch_appliers:
                apply_batch(conn, changes)
            deferred.extend(changes)
        if self._appliers:
            by_type = self._by_type
            for change in changes:
                kind = type(change.event)
                appliers = by_type.get(kind)
                if appliers is None:
                    appliers = by_type[kind] = self._appliers_for(kind)
                for apply in appliers:
                    apply(conn, change)
        self._sessions.settle(conn, states, before)
        for settle in self._settlers:
            settle(conn, states)
        if changes and not self.prefix:
            set_position(conn, changes[-1].position)

    def _appliers_for(self, kind: type) -> list[Callable[[apsw.Connection, Change], None]]:
        """The per-event appliers an event of type ``kind`` concerns (most events concern
        none: a bulk replay of message events then makes no call per event here)."""
        return [
            apply for types, apply in self._appliers if types is None or issubclass(kind, types)
        ]

    def drop_unreferenced_prompts(self, conn: apsw.Connection) -> list[str]:
        """Remove stored-prompt rows no session of this set sends; returns their hashes."""
        prompts = next(p for p in self.projectors if isinstance(p, PromptsProjector))
        gone = prompts.unreferenced(conn)
        for sha in gone:
            prompts.drop(conn, sha)
        return gone

    def forget(self, conn: apsw.Connection, session_id: str) -> None:
        """Remove every row of a deleted session (the index before the rows it reads)."""
        deferred: list[Change | str] | None = getattr(self._local, "deferred", None)
        if deferred is not None:
            # The index's forget deletes the entries of every row the session has: its rows
            # still waiting are indexed first (in this savepoint, so a rollback undoes both),
            # and the marker keeps the end of the group from indexing them again.
            waiting: list[Change] = []
            for entry in deferred:
                if entry == session_id:
                    waiting.clear()
                elif isinstance(entry, Change) and entry.stream == session_id:
                    waiting.append(entry)
            if waiting:
                for apply_batch in self._index_appliers:
                    apply_batch(conn, waiting)
            deferred.append(session_id)
        order = sorted(self.projectors, key=lambda p: p.name != "search")
        for projector in order:
            projector.forget(conn, session_id)

    # -- the deferred index of a group commit ------------------------------------------------

    @contextmanager
    def deferred_index(self, conn: apsw.Connection) -> Iterator[list[Change]]:
        """Within this block (on this thread) the full-text index rows of every applied event
        wait, and are written together when the block ends without an error, by one
        ``executemany``, before the transaction commits.

        A group commit runs each use case in its own savepoint, and FTS5 writes its pending
        rows out as a new segment at every savepoint: indexing each use case's rows inside
        its savepoint cost as much as committing it alone. The index rows are derived from
        the events alone (rows are only added), so writing them at the end of the group
        stores exactly the same index. A savepoint that rolls back drops the rows it
        deferred (``mark`` / ``undo_to``); a session forgotten in the group never gets its
        waiting rows written.

        It yields a list that holds, once the block ended, every change the block applied
        (in log order, without those of sessions it forgot): what the group stored.
        """
        stored: list[Change] = []
        if getattr(self._local, "deferred", None) is not None:
            yield stored  # already deferring (a nested group): the outer block writes them
            return
        deferred: list[Change | str] = []
        self._local.deferred = deferred
        try:
            yield stored
            kept = stored
            forgotten: set[str] = set()
            for entry in reversed(deferred):
                if isinstance(entry, str):
                    forgotten.add(entry)
                elif entry.stream not in forgotten:
                    kept.append(entry)
            kept.reverse()
            if kept:
                for apply_batch in self._index_appliers:
                    apply_batch(conn, kept)
        finally:
            self._local.deferred = None

    def mark(self) -> int:
        """Where this thread's deferred rows stand (-1 when not deferring)."""
        deferred: list[Change | str] | None = getattr(self._local, "deferred", None)
        return -1 if deferred is None else len(deferred)

    def undo_to(self, mark: int) -> None:
        """A savepoint rolled back: drop the rows it deferred."""
        deferred: list[Change | str] | None = getattr(self._local, "deferred", None)
        if deferred is not None and mark >= 0:
            del deferred[mark:]


def set_position(conn: apsw.Connection, position: int) -> None:
    """Record how far the projections have applied the log."""
    conn.execute(
        "INSERT INTO tracking (application_name, notification_id) VALUES (?, ?)"
        " ON CONFLICT (application_name) DO UPDATE SET notification_id = excluded.notification_id",
        (TRACKING_NAME, position),
    )


def get_position(conn: apsw.Connection) -> int:
    """The last log position the projections applied (0 when none)."""
    rows = conn.execute(
        "SELECT notification_id FROM tracking WHERE application_name = ?", (TRACKING_NAME,)
    ).fetchall()
    return int(rows[0][0]) if rows else 0


def ensure_schema(conn: apsw.Connection) -> None:
    """Create the event log, tracking and projection tables when missing.

    A store whose projections have an older layout gets them dropped and replayed from the
    log in the same transaction: projections are derived data, the log is the truth. Layouts
    that differ only by an index (``UPGRADES``) get the index instead of a replay.
    """
    _ensure_schema(conn)
    from hermes_es.projections.leftovers import clean_leftovers

    clean_leftovers(conn)  # what a killed rebuild or verify left behind


def _ensure_schema(conn: apsw.Connection) -> None:
    user_version = conn.execute("PRAGMA user_version").fetchall()[0][0]
    if user_version == SCHEMA_VERSION:
        return
    with write_transaction(conn):
        user_version = conn.execute("PRAGMA user_version").fetchall()[0][0]
        if user_version == SCHEMA_VERSION:
            return  # another process migrated it while this one waited for the lock
        for statement in EVENTS_SCHEMA:
            conn.execute(statement)
        while user_version in UPGRADES and user_version < SCHEMA_VERSION:
            UPGRADES[user_version](conn)
            user_version += 1
        if user_version == SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return
        live = ProjectionSet()
        if user_version:
            live.drop_views(conn)
            for table in live.tables():
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute("DROP TABLE IF EXISTS session_heads")  # layout 1 kept heads apart
            conn.execute("DROP TABLE IF EXISTS messages")  # layouts 1-7 kept text in a table
        live.create(conn)
        if user_version:
            from hermes_es.projections.rebuild import replay_into

            replay_into(conn, ProjectionSet(bulk=True))
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def connect(path: Path | str, *, readonly: bool = False) -> apsw.Connection:
    """Open state.db for projections and queries: tokenizer registered, schema present."""
    conn = open_db(path, readonly=readonly, hooks=[register_tokenizer])
    if not readonly:
        ensure_schema(conn)
    return conn
