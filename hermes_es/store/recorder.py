"""The APSW event recorders behind eventsourcing's persistence interface.

Each public method opens its own transaction and calls a private ``_method(conn, …)`` so the
session engine can share one IMMEDIATE transaction between "insert events" and "apply every
projection". Driver errors are translated into eventsourcing's error tree.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from uuid import UUID

import apsw
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    IntegrityError,
    Notification,
    OperationalError,
    PersistenceError,
    ProcessRecorder,
    StoredEvent,
    Subscription,
    Tracking,
    TrackingRecorder,
)

from hermes_es.store.codec import pack, unpack
from hermes_es.store.db import ConnectionHook, open_db, write_transaction
from hermes_es.store.schema import EVENTS_SCHEMA


def _oid(originator_id: UUID | str) -> str:
    return originator_id.hex if isinstance(originator_id, UUID) else originator_id


@contextmanager
def translated_errors() -> Iterator[None]:
    """Map APSW driver errors onto eventsourcing's persistence errors."""
    try:
        yield
    except apsw.ConstraintError as exc:
        raise IntegrityError(str(exc)) from exc
    except (apsw.BusyError, apsw.LockedError) as exc:
        raise OperationalError(f"database is busy: {exc}") from exc
    except apsw.Error as exc:
        raise PersistenceError(str(exc)) from exc


CHECKPOINT_PAGES = 1000
"""WAL size (pages) at which the background checkpointer is woken (SQLite's own default)."""

INLINE_CHECKPOINT_PAGES = 4_000
"""WAL size (pages, ~16 MB) at which a committing writer checkpoints itself: the backstop for
when the background checkpointer cannot keep up or cannot run."""


class Checkpointer:
    """Copies the WAL back into state.db from a background thread with its own connection.

    SQLite's automatic checkpoint runs inside the commit that crosses the threshold, which
    makes that one commit tens of times slower than the rest. Writers instead wake this thread
    from their WAL hook; its PASSIVE checkpoint never blocks a writer or a reader.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._pending = False

    def request(self) -> None:
        """Ask for a checkpoint soon (starts the thread on first use in this process).

        While one is pending or running, further requests return at once: waking a thread
        costs a GIL hand-off, which would otherwise be paid by every commit.
        """
        if self._pending and self._pid == os.getpid():
            return
        with self._lock:
            if self._stopping:
                return
            if self._thread is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="hermes-wal-checkpoint", daemon=True
                )
                self._thread.start()
            self._pending = True
        self._wake.set()

    def _run(self) -> None:
        try:
            conn = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READWRITE)
            # A connection that has read nothing has not opened the WAL: its checkpoints
            # would do nothing and report (-1, -1).
            conn.execute("SELECT 1 FROM sqlite_schema LIMIT 1").fetchall()
        except apsw.Error:
            return
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    # Busy with another checkpointer: the next request retries.
                    with suppress(apsw.Error):
                        conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
                finally:
                    self._pending = False
        finally:
            conn.close()

    def close(self) -> None:
        """Stop the thread (if running) and wait for it; it may start again later."""
        with self._lock:
            self._stopping = True
            thread, self._thread = self._thread, None
        self._wake.set()
        if thread is not None and self._pid == os.getpid():
            thread.join()
        with self._lock:
            self._stopping = False
            self._pending = False
            self._wake.clear()


class ApswDatastore:
    """One state.db file; one APSW connection per thread, opened on first use."""

    def __init__(self, path: Path | str, *, hooks: Sequence[ConnectionHook] = ()) -> None:
        self.path = Path(path)
        self.hooks = list(hooks)
        self._local = threading.local()
        self._all: list[apsw.Connection] = []
        self._lock = threading.Lock()
        self.checkpointer = Checkpointer(self.path)

    def _wal_hook(self, conn: apsw.Connection, name: str, pages: int) -> int:
        """After each commit: wake the checkpointer, or flag an overdue inline checkpoint.

        The checkpointer is woken once per ``CHECKPOINT_PAGES`` the WAL grows, not after every
        commit past the threshold: a writer that keeps committing never lets a background
        checkpoint leave the WAL fully copied when its next transaction starts (SQLite only
        restarts the WAL then), so waking it again after each commit would only add a thread
        hand-off per commit and a checkpoint (with its syncs) of a few frames each time.
        """
        local = self._local
        asked: int = getattr(local, "asked", 0)
        if pages < asked:  # the WAL restarted from its beginning
            asked = local.asked = 0
        if pages >= CHECKPOINT_PAGES and pages >= asked + CHECKPOINT_PAGES:
            local.asked = pages
            self.checkpointer.request()
        if pages >= INLINE_CHECKPOINT_PAGES:
            local.overdue = True
        return int(apsw.SQLITE_OK)

    def add_hook(self, hook: ConnectionHook) -> None:
        """Run ``hook`` on every connection opened from now on."""
        self.hooks.append(hook)

    def connection(self) -> apsw.Connection:
        """This thread's connection."""
        conn: apsw.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = open_db(self.path, hooks=self.hooks)
            with translated_errors(), write_transaction(conn):
                for statement in EVENTS_SCHEMA:
                    conn.execute(statement)
            conn.set_wal_hook(self._wal_hook)  # replaces SQLite's in-commit autocheckpoint
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[apsw.Connection]:
        """An IMMEDIATE write transaction (or a savepoint inside an open one)."""
        conn = self.connection()
        if conn.in_transaction:
            with translated_errors(), write_transaction(conn):
                yield conn
            return
        # ``translated_errors`` around ``write_transaction``, inlined: this runs once per
        # command and the two generator-based context managers cost more than the BEGIN.
        try:
            conn.execute("BEGIN IMMEDIATE")  # waits for the lock without holding the GIL
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except apsw.ConstraintError as exc:
            raise IntegrityError(str(exc)) from exc
        except (apsw.BusyError, apsw.LockedError) as exc:
            raise OperationalError(f"database is busy: {exc}") from exc
        except apsw.Error as exc:
            raise PersistenceError(str(exc)) from exc
        if not getattr(self._local, "later", False):
            self.checkpoint_if_overdue()

    def checkpoint_if_overdue(self) -> None:
        """The inline checkpoint a commit left overdue (WAL past ``INLINE_CHECKPOINT_PAGES``)."""
        local = self._local
        conn: apsw.Connection | None = getattr(local, "conn", None)
        if getattr(local, "overdue", False) and conn is not None and not conn.in_transaction:
            local.overdue = False
            # Like SQLite's own autocheckpoint: best effort, a busy WAL is retried later.
            with suppress(apsw.BusyError, apsw.LockedError):
                conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)

    @contextmanager
    def checkpoints_later(self) -> Iterator[None]:
        """Commits on this thread inside the block leave an overdue inline checkpoint for
        ``checkpoint_if_overdue`` (a group writer runs it once its callers are acknowledged:
        its two syncs need not hold them up)."""
        self._local.later = True
        try:
            yield
        finally:
            self._local.later = False

    def close(self) -> None:
        """Stop the checkpointer and close every connection this datastore opened."""
        self.checkpointer.close()
        with self._lock:
            for conn in self._all:
                _close_when_idle(conn)
            self._all.clear()
        self._local = threading.local()


CLOSE_WAIT_SECONDS = 2.0
"""How long ``close`` waits for another thread to finish the statement it is running."""


def _close_when_idle(conn: apsw.Connection) -> None:
    """Close ``conn``, waiting briefly while another thread is inside a call on it."""
    deadline = time.monotonic() + CLOSE_WAIT_SECONDS
    while True:
        try:
            conn.close()
            return
        except apsw.ThreadingViolationError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.001)


_INSERT_EVENT = (
    "INSERT INTO events (originator_id, originator_version, topic, state) VALUES (?, ?, ?, ?)"
)


class ApswApplicationRecorder(ApplicationRecorder):
    """Stores events in the ``events`` table; the row id is the notification id."""

    def __init__(self, datastore: ApswDatastore) -> None:
        self.datastore = datastore

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """Insert events atomically; returns their notification ids."""
        with self.datastore.transaction() as conn:
            ids = self._insert_events(conn, stored_events)
            tracking = kwargs.get("tracking")
            if isinstance(tracking, Tracking):
                _insert_tracking(conn, tracking)
            return ids

    def _insert_events(
        self, conn: apsw.Connection, stored_events: Sequence[StoredEvent]
    ) -> list[int]:
        ids: list[int] = []
        execute = conn.execute
        with translated_errors():
            for s in stored_events:
                # last_insert_rowid rather than RETURNING: RETURNING buffers its rows through
                # a second pass in SQLite and costs a cursor fetch (~6 us an event).
                execute(
                    _INSERT_EVENT,
                    (_oid(s.originator_id), s.originator_version, s.topic, pack(s.state)),
                )
                ids.append(conn.last_insert_rowid())
        return ids

    def _insert_rows(
        self, conn: apsw.Connection, rows: Sequence[tuple[str, int, str, bytes]]
    ) -> list[int]:
        """Insert ``(stream, version, topic, payload)`` rows with one ``executemany`` inside
        the caller's transaction; returns their notification ids.

        One statement inserting row after row gives consecutive ids (nothing else can insert
        in between: the transaction holds the write lock), so the ids end at the last insert
        rowid; the first one is checked against the log all the same.
        """
        if not rows:
            return []
        conn.executemany(_INSERT_EVENT, [(s, v, t, pack(p)) for s, v, t, p in rows])
        last = conn.last_insert_rowid()
        first = last - len(rows) + 1
        check = conn.execute(
            "SELECT id FROM events WHERE originator_id = ? AND originator_version = ?",
            (rows[0][0], rows[0][1]),
        ).fetchall()
        if not check or check[0][0] != first:
            raise PersistenceError(
                f"events were not given consecutive ids (expected {first}, got {check})"
            )
        return list(range(first, last + 1))

    def _delete_events(self, conn: apsw.Connection, originator_id: str) -> int:
        """Physically remove a stream's events (a verified delete); returns how many went."""
        conn.execute("DELETE FROM events WHERE originator_id = ?", (originator_id,))
        return int(conn.changes())

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        """Events of one stream, in version order."""
        conn = self.datastore.connection()
        with translated_errors():
            return self._select_events(
                conn, _oid(originator_id), gt=gt, lte=lte, desc=desc, limit=limit
            )

    def _select_events(
        self,
        conn: apsw.Connection,
        originator_id: str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> list[StoredEvent]:
        sql = "SELECT originator_version, topic, state FROM events WHERE originator_id = ?"
        params: list[Any] = [originator_id]
        if gt is not None:
            sql += " AND originator_version > ?"
            params.append(gt)
        if lte is not None:
            sql += " AND originator_version <= ?"
            params.append(lte)
        sql += " ORDER BY originator_version " + ("DESC" if desc else "ASC")
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        originator: UUID | str = originator_id
        if len(originator_id) == 32:
            try:
                originator = UUID(hex=originator_id)
            except ValueError:
                originator = originator_id
        return [
            StoredEvent(originator_id=originator, originator_version=v, topic=t, state=unpack(s))
            for v, t, s in conn.execute(sql, params)
        ]

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        """Events of every stream, in notification (commit) order."""
        sql = "SELECT id, originator_id, originator_version, topic, state FROM events WHERE 1"
        params: list[Any] = []
        if start is not None:
            sql += " AND id >= ?" if inclusive_of_start else " AND id > ?"
            params.append(start)
        if stop is not None:
            sql += " AND id <= ?"
            params.append(stop)
        if topics:
            sql += f" AND topic IN ({','.join('?' * len(topics))})"
            params.extend(topics)
        sql += " ORDER BY id LIMIT ?"
        params.append(limit)
        conn = self.datastore.connection()
        with translated_errors():
            rows = conn.execute(sql, params).fetchall()
        out = []
        for nid, oid, version, topic, state in rows:
            originator: UUID | str = oid
            if len(oid) == 32:
                try:
                    originator = UUID(hex=oid)
                except ValueError:
                    originator = oid
            out.append(
                Notification(
                    id=nid,
                    originator_id=originator,
                    originator_version=version,
                    topic=topic,
                    state=unpack(state),
                )
            )
        return out

    def max_notification_id(self) -> int | None:
        """The newest notification id, or None when the log is empty."""
        conn = self.datastore.connection()
        with translated_errors():
            return _max_notification_id(conn)

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        """A polling subscription: yields new notifications as other connections commit them."""
        return PollingSubscription(self, gt=gt, topics=topics)


def _max_notification_id(conn: apsw.Connection) -> int | None:
    row = conn.execute("SELECT MAX(id) FROM events").fetchall()
    return None if row[0][0] is None else int(row[0][0])


class PollingSubscription(Subscription[ApplicationRecorder]):
    """Iterates notifications after ``gt``, polling the log when it has caught up."""

    poll_interval = 0.05

    def __init__(
        self, recorder: ApplicationRecorder, gt: int | None = None, topics: Sequence[str] = ()
    ) -> None:
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self._buffer: list[Notification] = []

    def __next__(self) -> Notification:
        if self._has_been_stopped:
            raise StopIteration
        while not self._buffer:
            if self._has_been_stopped:
                raise StopIteration
            batch = self._recorder.select_notifications(
                start=self._last_notification_id,
                limit=500,
                topics=self._topics,
                inclusive_of_start=self._last_notification_id is None,
            )
            if batch:
                self._buffer.extend(batch)
            else:
                time.sleep(self.poll_interval)
        item = self._buffer.pop(0)
        self._last_notification_id = item.id
        return item


def _insert_tracking(conn: apsw.Connection, tracking: Tracking) -> None:
    rows = conn.execute(
        "INSERT INTO tracking (application_name, notification_id) VALUES (?, ?)"
        " ON CONFLICT (application_name) DO UPDATE SET notification_id = excluded.notification_id"
        " WHERE tracking.notification_id < excluded.notification_id"
        " RETURNING notification_id",
        (tracking.application_name, tracking.notification_id),
    ).fetchall()
    if not rows:
        raise IntegrityError(
            f"tracking for {tracking.application_name!r} is already at or past "
            f"{tracking.notification_id}"
        )


class ApswTrackingRecorder(TrackingRecorder):
    """Records how far a reader (a projection set) has processed the log."""

    def __init__(self, datastore: ApswDatastore) -> None:
        self.datastore = datastore

    def insert_tracking(self, tracking: Tracking) -> None:
        """Advance a reader's position; going backwards or repeating is an IntegrityError."""
        with self.datastore.transaction() as conn:
            _insert_tracking(conn, tracking)

    def max_tracking_id(self, application_name: str) -> int | None:
        """The reader's position, or None when it has recorded nothing."""
        conn = self.datastore.connection()
        with translated_errors():
            rows = conn.execute(
                "SELECT notification_id FROM tracking WHERE application_name = ?",
                (application_name,),
            ).fetchall()
        return int(rows[0][0]) if rows else None


class ApswProcessRecorder(ApswTrackingRecorder, ApswApplicationRecorder, ProcessRecorder):
    """Application recorder and tracking recorder sharing one datastore."""

    def __init__(self, datastore: ApswDatastore) -> None:
        self.datastore = datastore


class ApswAggregateRecorder(ApswApplicationRecorder, AggregateRecorder):
    """Aggregate recorder (used for snapshots by eventsourcing applications)."""

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """Insert events atomically; an aggregate recorder returns no notification ids."""
        super().insert_events(stored_events, **kwargs)
        return None
