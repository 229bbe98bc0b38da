"""Rebuild the projections from the log, and verify the live ones against a fresh replay."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import msgspec

from hermes_es import events as ev
from hermes_es.aggregates.state import SessionState, apply, decode_state
from hermes_es.events import SessionDeleted
from hermes_es.projections.base import Change, ReplayRaced
from hermes_es.projections.catalog import (
    TRACKING_NAME,
    ProjectionSet,
    connect,
    get_position,
    set_position,
)
from hermes_es.projections.fts import register_tokenizer
from hermes_es.projections.leftovers import REBUILD_PREFIX, rebuild_lock
from hermes_es.projections.rebuild_reader import End, Ops, Reader
from hermes_es.projections.rebuild_wal import RebuildCheckpoints
from hermes_es.projections.replay_gc import replay_collection
from hermes_es.store.db import BUSY_TIMEOUT_MS, file_uri, read_transaction, write_transaction
from hermes_es.store.decoding import decode_row
from hermes_es.store.message_text import register_message_text
from hermes_es.store.schema import EVENTS_SCHEMA
from hermes_es.store.scrub import truncate_wal

Progress = Callable[[int, int], None]
"""Called with (events replayed, size of the log), the last time with (replayed, replayed). The
size is the log's last position (``_log_size``): its event count, or more when sessions were
deleted from it."""

BATCH = 5000
REBUILD_CACHE_KIB = 65536
"""Page cache of a rebuild's connection (SQLite's default is 2 MiB): the fresh tables' recent
pages (session rows updated across batches, index segments being merged) stay in memory."""
RACE_ATTEMPTS = 5
"""Replays started over when sessions are deleted under them (``ReplayRaced``) before giving up."""
NON_SESSION_PREFIXES = ("prompt:", "receipt:", "gateway:")
READER_MIN_EVENTS = 50_000
"""Logs from this size up (``_log_size``) are rebuilt with a reader process (starting one costs a
fraction of a second; below this the rebuild itself takes about that long)."""


def is_session_stream(stream: str) -> bool:
    """Session streams carry session state; prompt and receipt streams do not."""
    return not stream.startswith(NON_SESSION_PREFIXES)


def _log_batches(
    conn: apsw.Connection, after: int, upto: int | None = None, *, schema: str = "main"
) -> Iterator[list[Change]]:
    last = after
    while True:
        sql = (
            "SELECT id, originator_id, originator_version, topic, state"
            f" FROM {schema}.events WHERE id > ?"
        )
        params: list[object] = [last]
        if upto is not None:
            sql += " AND id <= ?"
            params.append(upto)
        rows = conn.execute(sql + " ORDER BY id LIMIT ?", [*params, BATCH]).fetchall()
        if not rows:
            return
        yield _changes(rows)
        last = rows[-1][0]


def _changes(rows: list[tuple[object, ...]]) -> list[Change]:
    """The rows of a log batch as changes: decoded straight (``events.decode``); a row that
    does not decode goes through ``decode_row``, which names what is wrong with it."""
    decode = ev.decode
    try:
        return [
            Change(position=p, stream=s, version=v, event=decode(t, b))  # type: ignore[arg-type]
            for p, s, v, t, b in rows
        ]
    except Exception:  # diagnosed row by row below
        return [
            Change(
                position=r[0],  # type: ignore[arg-type]
                stream=r[1],  # type: ignore[arg-type]
                version=r[2],  # type: ignore[arg-type]
                event=decode_row(r[3], r[4], stream=r[1], version=r[2], position=r[0]),
            )
            for r in rows
        ]


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


def _log_size(conn: apsw.Connection, schema: str = "main") -> int:
    """The log's last position: its event count unless sessions were deleted from it (their
    events go; positions are never reused). It is the last entry of the rowid b-tree, a few
    pages at any size, where ``COUNT(*)`` reads a whole index: ~190 MB at 5,000,000 messages,
    8 s when the store was not in the page cache (bench/README.md, big_store, "Rebuild at
    5,000,000 messages")."""
    rows = conn.execute(f"SELECT MAX(id) FROM {schema}.events").fetchall()
    return int(rows[0][0] or 0)


def _drop(conn: apsw.Connection, tables: list[str]) -> None:
    for table in tables:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def rebuild(
    db_path: Path | str, progress: Progress | None = None, *, reader: bool | None = None
) -> int:
    """Replay the whole log into fresh tables, then swap them in with one transaction.

    Writers keep working during the replay; the swap transaction first catches up with events
    committed meanwhile. Returns the number of events replayed.

    ``reader``: read, decode and fold the log in a second process ahead of this one, which then
    only writes (``rebuild_reader``); by default when the log holds ``READER_MIN_EVENTS`` or
    more and the machine has more than one core. The tables built are the same either way.
    """
    with rebuild_lock(db_path):
        conn = connect(db_path)
        fresh = ProjectionSet(REBUILD_PREFIX, bulk=True)
        checkpoints = RebuildCheckpoints(conn, db_path)
        try:
            try:
                checkpoints.start()
                try:
                    count = _rebuild(db_path, conn, fresh, progress, reader, checkpoints)
                finally:
                    checkpoints.stop()
            except BaseException:
                drop_generation(conn, fresh)
                raise
            truncate_wal(conn, wait_ms=0)  # best effort: old pages leave the WAL
            if progress:
                progress(count, count)
            return count
        finally:
            conn.close()


def drop_generation(conn: apsw.Connection, pset: ProjectionSet) -> None:
    """Drop a generation's tables with their pages zeroed as they are freed.

    ``secure_delete`` stays on: the pages hold copies of message text, and a session deleted
    later must leave no copy behind in free pages.
    """
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    with write_transaction(conn):
        conn.execute("PRAGMA secure_delete = ON")
        _drop(conn, pset.tables())


def _rebuild(
    db_path: Path | str,
    conn: apsw.Connection,
    fresh: ProjectionSet,
    progress: Progress | None,
    use_reader: bool | None,
    checkpoints: RebuildCheckpoints | None = None,
) -> int:
    if use_reader is None:
        use_reader = (os.cpu_count() or 1) > 1 and _log_size(conn) >= READER_MIN_EVENTS
    for attempt in range(1, RACE_ATTEMPTS + 1):
        reader = Reader(db_path, fresh.prefix, BATCH) if use_reader else None
        try:
            return _rebuild_once(conn, fresh, progress, reader, checkpoints)
        except ReplayRaced:
            if attempt == RACE_ATTEMPTS:
                raise
            drop_generation(conn, fresh)  # start over from the log as it is now
        finally:
            if reader is not None:
                reader.close()
    raise AssertionError("unreachable")


def _rebuild_once(
    conn: apsw.Connection,
    fresh: ProjectionSet,
    progress: Progress | None,
    reader: Reader | None,
    checkpoints: RebuildCheckpoints | None = None,
) -> int:
    live = ProjectionSet()
    with conn:
        _drop(conn, fresh.tables())
        fresh.create(conn, with_indexes=False)
        fresh.begin_fill(conn)
    conn.execute(f"PRAGMA cache_size = -{REBUILD_CACHE_KIB}")
    replayer = Replayer(fresh)
    total = _log_size(conn)
    with replay_collection() as tick:
        if reader is None:
            for changes in _log_batches(conn, 0):
                with conn:
                    replayer.feed(conn, changes)
                if checkpoints is not None:
                    checkpoints.after_commit()
                if progress:
                    progress(replayer.count, max(total, replayer.count))
                tick()
        else:
            for frame in reader.frames():
                if isinstance(frame, End):
                    break
                with conn:
                    if isinstance(frame, Ops):
                        reader.apply(conn, frame)
                        replayer.position = frame.position
                        replayer.count += frame.count
                    else:
                        feed_from_heads(conn, replayer, _changes(frame.rows))  # type: ignore[arg-type]
                if checkpoints is not None:
                    checkpoints.after_commit()
                if progress:
                    progress(replayer.count, max(total, replayer.count))
                tick()
    # What the fill left to do (the full-text index's merges), in short transactions of its
    # own: writers keep working meanwhile, as during the replay.
    while True:
        with conn:
            more = fresh.merge_fill(conn)
        if checkpoints is not None:
            checkpoints.after_commit()
        if not more:
            break
    with conn:
        fresh.end_fill(conn)
        for changes in _log_batches(conn, replayer.position):
            if reader is None:
                replayer.feed(conn, changes)
            else:  # the states are the reader's: the heads written so far hold them
                feed_from_heads(conn, replayer, changes)
        # The old generation's pages are zeroed as they are freed (secure_delete is on for
        # every connection): they hold copies of text a later delete must not leave behind.
        live.drop_views(conn)
        _drop(conn, live.tables())
        for old, new in zip(fresh.tables(), live.tables(), strict=True):
            conn.execute(f"ALTER TABLE {old} RENAME TO {new}")
        live.create_views(conn)
        live.create_indexes(conn)
        set_position(conn, replayer.position or get_position(conn))
    return replayer.count


def feed_from_heads(conn: apsw.Connection, replayer: Replayer, changes: list[Change]) -> None:
    """``replayer.feed`` with the touched sessions' states read from the heads written so far.

    With a reader process the states are folded there; a batch the writer replays itself
    (``Rows``) starts from the heads of the tables being built, which are those states: every
    batch writes the head of every session it touched, and a delete removes the row.
    """
    table = f"{replayer.pset.prefix}sessions"
    ids = list(dict.fromkeys(c.stream for c in changes if is_session_stream(c.stream)))
    states: dict[str, SessionState] = {}
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        rows = conn.execute(
            f"SELECT id, head FROM {table} WHERE id IN ({', '.join('?' * len(chunk))})", chunk
        ).fetchall()
        states.update((str(sid), decode_state(head)) for sid, head in rows)
    replayer.states = states
    replayer.feed(conn, changes)


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
        "rowid"
        if table in ("message_rows", "deletions", "sessions", "messages_fts_docsize")
        else "1"
    )
    for row in conn.execute(
        f"SELECT {', '.join(cols)} FROM {schema}.{table} ORDER BY {order}, {', '.join(cols)}"
    ):
        digest.update(repr(row).encode())
        count += 1
    return count, digest.hexdigest()


LIVE = "live"
"""Schema name the live store is attached under while verifying."""


def _scratch(db_path: Path) -> apsw.Connection:
    """A private scratch database with the live store attached read-only as ``live``.

    The scratch is SQLite's temporary database (an empty file name): the file is unlinked the
    moment it is created, so it is readable by no other process and cannot outlive this one,
    however it ends (even SIGKILL). The live store is only ever read, so verify works on a
    store the user cannot write and never takes its write lock.
    """
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI
    conn = apsw.Connection("", flags=flags)
    conn.setbusytimeout(BUSY_TIMEOUT_MS)
    register_tokenizer(conn)
    register_message_text(conn)
    for statement in EVENTS_SCHEMA:
        conn.execute(statement)
    ProjectionSet().create(conn)
    try:
        conn.execute(f"ATTACH DATABASE ? AS {LIVE}", (file_uri(db_path),))
        conn.execute(f"SELECT 1 FROM {LIVE}.sqlite_schema LIMIT 1").fetchall()
    except (apsw.CantOpenError, apsw.ReadOnlyError):  # no -shm, none can be created
        if LIVE in [row[1] for row in conn.execute("PRAGMA database_list")]:
            conn.execute(f"DETACH DATABASE {LIVE}")
        conn.execute(f"ATTACH DATABASE ? AS {LIVE}", (file_uri(db_path, immutable=True),))
    return conn


def verify(db_path: Path | str, progress: Progress | None = None) -> list[TableDiff]:
    """Replay the log into a scratch database and compare every projection table with live.

    The replay reads the log in batches, each in its own short read transaction, so writers
    keep checkpointing the WAL meanwhile. The comparison then opens one read transaction:
    inside it the replay catches up with the log head and every live table is read, so the
    log position and the projections compared are those of one consistent snapshot.
    """
    db_path = Path(db_path)
    for attempt in range(1, RACE_ATTEMPTS + 1):
        try:
            return _verify_once(db_path, progress)
        except ReplayRaced:
            if attempt == RACE_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _verify_once(db_path: Path, progress: Progress | None) -> list[TableDiff]:
    conn = _scratch(db_path)
    try:
        replayer = Replayer(ProjectionSet(bulk=True))
        with conn:
            total = _log_size(conn, LIVE)
        with replay_collection() as tick:
            for changes in _log_batches(conn, 0, schema=LIVE):
                with conn:
                    replayer.feed(conn, changes)
                if progress:
                    progress(replayer.count, max(total, replayer.count))
                tick()
        with read_transaction(conn):
            for changes in _log_batches(conn, replayer.position, schema=LIVE):
                replayer.feed(conn, changes)
            diffs = _compare(conn)
        if progress:
            progress(replayer.count, replayer.count)
        return diffs
    finally:
        conn.close()


def _compare_index(conn: apsw.Connection) -> TableDiff:
    """Compare the full-text index by content: every (term, document, column, offset).

    The live index's own structure is checked with ``PRAGMA integrity_check``, which reads
    only (FTS5's ``'integrity-check'`` command is an INSERT: it needs the write lock, fails on
    a read-only store and, inside a read snapshot, whenever a writer has committed since).
    """
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.live_vocab"
        f" USING fts5vocab({LIVE}, messages_fts, instance)"
    )
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.new_vocab"
        " USING fts5vocab(main, messages_fts, instance)"
    )
    try:
        rows = conn.execute(f"PRAGMA {LIVE}.integrity_check(messages_fts)").fetchall()
        ok = [str(r[0]) for r in rows] == ["ok"]
        # Both vocabularies list instances in (term, doc, col, offset) order: walk them side
        # by side (a second cursor on the same connection reads the same snapshot).
        query = "SELECT term, doc, col, offset FROM {}"
        live = conn.cursor().execute(query.format("temp.live_vocab"))
        new = conn.cursor().execute(query.format("temp.new_vocab"))
        live_n = new_n = 0
        same = True
        for a, b in itertools.zip_longest(live, new):
            live_n += a is not None
            new_n += b is not None
            same = same and a == b
        return TableDiff("messages_fts", live_n, new_n, ok and same)
    finally:
        conn.execute("DROP TABLE IF EXISTS temp.live_vocab")
        conn.execute("DROP TABLE IF EXISTS temp.new_vocab")


def _compare(conn: apsw.Connection) -> list[TableDiff]:
    tables = [t for t in ProjectionSet().tables() if t != "messages_fts"]
    tables.append("messages_fts_docsize")
    diffs = []
    for table in tables:
        live_n, live_sum = _checksum(conn, LIVE, table)
        new_n, new_sum = _checksum(conn, "main", table)
        diffs.append(TableDiff(table, live_n, new_n, live_sum == new_sum))
    diffs.append(_compare_index(conn))
    positions = []
    for schema in (LIVE, "main"):
        rows = conn.execute(
            f"SELECT notification_id FROM {schema}.tracking WHERE application_name = ?",
            (TRACKING_NAME,),
        ).fetchall()
        positions.append(int(rows[0][0]) if rows else 0)
    live_pos, new_pos = positions
    diffs.append(TableDiff("tracking", live_pos, new_pos, live_pos == new_pos))
    return diffs
