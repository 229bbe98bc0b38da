"""Rebuild the projections from the log, and verify the live ones against a fresh replay."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import msgspec

from hermes_es import events as ev
from hermes_es.aggregates.state import SessionState, apply
from hermes_es.events import SessionDeleted
from hermes_es.projections.base import Change
from hermes_es.projections.catalog import ProjectionSet, connect, get_position, set_position

Progress = Callable[[int, int], None]
"""Called with (events replayed, events in the log)."""

BATCH = 5000
REBUILD_PREFIX = "rebuild_"
NON_SESSION_PREFIXES = ("prompt:", "receipt:")


def is_session_stream(stream: str) -> bool:
    """Session streams carry session state; prompt and receipt streams do not."""
    return not stream.startswith(NON_SESSION_PREFIXES)


def _log_batches(
    conn: apsw.Connection, after: int, upto: int | None = None
) -> Iterator[list[Change]]:
    last = after
    while True:
        sql = "SELECT id, originator_id, originator_version, topic, state FROM events WHERE id > ?"
        params: list[object] = [last]
        if upto is not None:
            sql += " AND id <= ?"
            params.append(upto)
        rows = conn.execute(sql + " ORDER BY id LIMIT ?", [*params, BATCH]).fetchall()
        if not rows:
            return
        yield [
            Change(position=r[0], stream=r[1], version=r[2], event=ev.decode(r[3], r[4]))
            for r in rows
        ]
        last = rows[-1][0]


class Replayer:
    """Replays log batches into a projection set, folding session states in memory."""

    def __init__(self, pset: ProjectionSet) -> None:
        self.pset = pset
        self.states: dict[str, SessionState] = {}
        self.position = 0
        self.count = 0

    def feed(self, conn: apsw.Connection, changes: list[Change]) -> None:
        """Apply one batch (the caller owns the transaction).

        A delete receipt in the batch erases that session from the tables being built, in log
        order: a session deleted while a rebuild was replaying it (its events were already
        copied into the fresh tables) must not come back at the swap, and a session recreated
        under the same id afterwards starts from an empty state.
        """
        start = 0
        for i, change in enumerate(changes):
            if isinstance(change.event, SessionDeleted):
                self._apply(conn, changes[start : i + 1])
                self.states.pop(change.event.session_id, None)
                self.pset.forget(conn, change.event.session_id)
                self.pset.drop_unreferenced_prompts(conn)
                start = i + 1
        self._apply(conn, changes[start:])
        self.position = changes[-1].position
        self.count += len(changes)

    def _apply(self, conn: apsw.Connection, changes: list[Change]) -> None:
        if not changes:
            return
        touched: dict[str, SessionState] = {}
        for change in changes:
            if not is_session_stream(change.stream):
                continue
            state = self.states.get(change.stream)
            if state is None:
                state = self.states[change.stream] = SessionState(session_id=change.stream)
            apply(state, change.event, change.version)
            touched[change.stream] = state
        self.pset.apply(conn, changes, touched)


def replay_into(conn: apsw.Connection, pset: ProjectionSet) -> int:
    """Replay the whole log into ``pset`` inside the caller's transaction; returns the count."""
    replayer = Replayer(pset)
    for changes in _log_batches(conn, 0):
        replayer.feed(conn, changes)
    return replayer.count


def _total(conn: apsw.Connection) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM events").fetchall()[0][0])


def _drop(conn: apsw.Connection, tables: list[str]) -> None:
    for table in tables:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def rebuild(db_path: Path | str, progress: Progress | None = None) -> int:
    """Replay the whole log into fresh tables, then swap them in with one transaction.

    Writers keep working during the replay; the swap transaction first catches up with events
    committed meanwhile. Returns the number of events replayed.
    """
    conn = connect(db_path)
    try:
        fresh = ProjectionSet(REBUILD_PREFIX, bulk=True)
        live = ProjectionSet()
        with conn:
            _drop(conn, fresh.tables())
            fresh.create(conn, with_indexes=False)
        replayer = Replayer(fresh)
        total = _total(conn)
        for changes in _log_batches(conn, 0):
            with conn:
                replayer.feed(conn, changes)
            if progress:
                progress(replayer.count, max(total, replayer.count))
        with conn:
            for changes in _log_batches(conn, replayer.position):
                replayer.feed(conn, changes)
            # The old generation holds nothing the new one lacks (deleted sessions were
            # already erased row by row), so its pages need not be zeroed as they are freed.
            conn.execute("PRAGMA secure_delete = OFF")
            try:
                _drop(conn, live.tables())
            finally:
                conn.execute("PRAGMA secure_delete = ON")
            for old, new in zip(fresh.tables(), live.tables(), strict=True):
                conn.execute(f"ALTER TABLE {old} RENAME TO {new}")
            live.create_indexes(conn)
            set_position(conn, replayer.position or get_position(conn))
        if progress:
            progress(replayer.count, replayer.count)
        return replayer.count
    finally:
        conn.close()


class TableDiff(msgspec.Struct, frozen=True):
    """How one projection table compares with its rebuilt twin."""

    table: str
    live_rows: int
    rebuilt_rows: int
    equal: bool


def _checksum(conn: apsw.Connection, schema: str, table: str) -> tuple[int, str]:
    cols = [r[1] for r in conn.execute(f"PRAGMA {schema}.table_info({table})")]
    digest = hashlib.sha256()
    count = 0
    order = (
        "rowid" if table in ("messages", "deletions", "sessions", "messages_fts_docsize") else "1"
    )
    for row in conn.execute(
        f"SELECT {', '.join(cols)} FROM {schema}.{table} ORDER BY {order}, {', '.join(cols)}"
    ):
        digest.update(repr(row).encode())
        count += 1
    return count, digest.hexdigest()


def verify(db_path: Path | str, progress: Progress | None = None) -> list[TableDiff]:
    """Replay the log into a scratch database and compare every projection table with live."""
    db_path = Path(db_path)
    fd, scratch_name = tempfile.mkstemp(prefix=".verify-", suffix=".db", dir=db_path.parent)
    os.close(fd)
    scratch = Path(scratch_name)
    try:
        live_conn = connect(db_path)
        live_conn.transaction_mode = "DEFERRED"  # a read snapshot; writers keep working
        scratch_conn = connect(scratch)
        replayer = Replayer(ProjectionSet(bulk=True))
        with live_conn:  # one read snapshot of the log and the live tables
            live_conn.execute("SELECT 1 FROM events LIMIT 1").fetchall()
            total = _total(live_conn)
            for changes in _log_batches(live_conn, 0):
                with scratch_conn:
                    replayer.feed(scratch_conn, changes)
                if progress:
                    progress(replayer.count, max(total, replayer.count))
            scratch_conn.close()
            live_conn.execute("ATTACH DATABASE ? AS scratch", (str(scratch),))
            diffs = _compare(live_conn)
        live_conn.execute("DETACH DATABASE scratch")
        live_conn.close()
        return diffs
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(str(scratch) + suffix).unlink(missing_ok=True)


def _compare_index(conn: apsw.Connection) -> TableDiff:
    """Compare the full-text index by content: every (term, document, column, offset)."""
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.live_vocab"
        " USING fts5vocab(main, messages_fts, instance)"
    )
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.new_vocab"
        " USING fts5vocab(scratch, messages_fts, instance)"
    )
    try:
        ok = True
        try:
            conn.execute("INSERT INTO main.messages_fts(messages_fts) VALUES ('integrity-check')")
        except apsw.Error:
            ok = False
        sums = []
        for table in ("temp.live_vocab", "temp.new_vocab"):
            digest = hashlib.sha256()
            n = 0
            for row in conn.execute(f"SELECT term, doc, col, offset FROM {table}"):
                digest.update(repr(row).encode())
                n += 1
            sums.append((n, digest.hexdigest()))
        return TableDiff("messages_fts", sums[0][0], sums[1][0], ok and sums[0][1] == sums[1][1])
    finally:
        conn.execute("DROP TABLE IF EXISTS temp.live_vocab")
        conn.execute("DROP TABLE IF EXISTS temp.new_vocab")


def _compare(conn: apsw.Connection) -> list[TableDiff]:
    tables = [t for t in ProjectionSet().tables() if t != "messages_fts"]
    tables.append("messages_fts_docsize")
    diffs = []
    for table in tables:
        live_n, live_sum = _checksum(conn, "main", table)
        new_n, new_sum = _checksum(conn, "scratch", table)
        diffs.append(TableDiff(table, live_n, new_n, live_sum == new_sum))
    diffs.append(_compare_index(conn))
    live_pos = get_position(conn)
    rows = conn.execute(
        "SELECT notification_id FROM scratch.tracking WHERE application_name = 'projections'"
    ).fetchall()
    new_pos = int(rows[0][0]) if rows else 0
    diffs.append(TableDiff("tracking", live_pos, new_pos, live_pos == new_pos))
    return diffs
