"""One write transaction: load heads, decide, store events, apply every projection, commit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TypeVar, cast

import apsw
import msgspec
from eventsourcing.persistence import (
    InfrastructureFactory,
    IntegrityError,
    OperationalError,
    PersistenceError,
    StoredEvent,
)
from eventsourcing.utils import Environment

from hermes_es import events as ev
from hermes_es.aggregates.state import SessionState, apply, decode_state
from hermes_es.aggregates.validation import check_text
from hermes_es.errors import ConflictError, StoreBusyError, StoreError
from hermes_es.projections.base import Change
from hermes_es.projections.catalog import ProjectionSet, ensure_schema
from hermes_es.projections.fts import register_tokenizer
from hermes_es.projections.rebuild import is_session_stream
from hermes_es.projections.submissions import with_submissions
from hermes_es.store.db import BUSY_TIMEOUT_MS
from hermes_es.store.recorder import ApswApplicationRecorder, ApswDatastore, translated_errors

PERSISTENCE_MODULE = "hermes_es.store.persistence"

T = TypeVar("T")


class Store:
    """The event log and its projections in one state.db, behind eventsourcing's recorder."""

    def __init__(self, db_path: Path, *, clock: Callable[[], float] = time.time) -> None:
        env = Environment(
            "hermes", {"PERSISTENCE_MODULE": PERSISTENCE_MODULE, "APSW_DBNAME": str(db_path)}
        )
        self.factory = InfrastructureFactory.construct(env)
        recorder = self.factory.application_recorder()
        assert isinstance(recorder, ApswApplicationRecorder)
        self.recorder = recorder
        self.datastore: ApswDatastore = recorder.datastore
        self.datastore.add_hook(register_tokenizer)
        self.datastore.add_hook(ensure_schema)
        self.path = db_path
        self.clock = clock
        self.projections = ProjectionSet()
        self._local = threading.local()
        """The writer thread's group (``group``) and deferred use case (``scope``), if any."""

    def connection(self) -> apsw.Connection:
        """This thread's connection (a deferred use case may not read it: ``NeedsConnection``)."""
        if getattr(self._local, "scope", None) is not None:
            raise NeedsConnection
        return self.datastore.connection()

    def transaction(self) -> AbstractContextManager[Batch]:
        """An IMMEDIATE transaction with a batch collecting the events to store.

        Inside a deferred use case of a group commit (``run_deferred``) it is a
        ``DeferredBatch`` instead: no SQL at all, what it records joins the use case when
        the block ends without an error.
        """
        scope: DeferredBatch | None = getattr(self._local, "scope", None)
        if scope is not None:
            if scope.parent is None and not scope.states and not scope.pending:
                # The use case's first block: it records into the use case's own scope
                # (empty, so an error undoes it by emptying the scope), no batch of its own.
                return cast("AbstractContextManager[Batch]", _FirstBlock(scope))
            return cast("AbstractContextManager[Batch]", DeferredBatch(self, scope.group, scope))
        return self._transaction()

    @contextmanager
    def _transaction(self) -> Iterator[Batch]:
        heads: _Group | None = getattr(self._local, "heads", None)
        if heads is not None and getattr(self._local, "group", None) is None:
            heads.forget()  # this thread writes outside a group: its cached heads may go stale
        projections = self.projections
        try:
            with self.datastore.transaction() as conn:
                batch = Batch(self, conn)
                mark = projections.mark()
                try:
                    yield batch
                    batch.flush()
                except BaseException:
                    projections.undo_to(mark)  # this savepoint's deferred index rows go too
                    raise
        except IntegrityError as exc:
            raise ConflictError.lost_race(exc) from exc
        except (OperationalError, apsw.BusyError) as exc:
            raise StoreBusyError(
                f"state.db at {self.path} stayed locked by another process for"
                f" {BUSY_TIMEOUT_MS // 1000} s; nothing was changed; try again"
                " ('hermes doctor' lists who holds it)",
                subject=str(self.path),
            ) from exc
        except (PersistenceError, apsw.IOError, apsw.FullError, apsw.ReadOnlyError) as exc:
            raise StoreError(
                f"could not write state.db at {self.path}: {exc}; nothing was changed",
                subject=str(self.path),
            ) from exc

    @contextmanager
    def group_transaction(self) -> Iterator[list[Change]]:
        """The transaction of a group commit: ``transaction()``, with the full-text index rows
        of every use case inside written once, together, before it commits
        (``ProjectionSet.deferred_index``). Yields the list of the changes the group stored,
        filled in when the block ends (complete once the transaction committed)."""
        group: _Group | None = getattr(self._local, "heads", None)
        if group is None:
            group = self._local.heads = _Group()
        self._local.group = group  # set first: this transaction keeps the heads
        try:
            with self.transaction() as batch, self.projections.deferred_index(batch.conn) as st:
                group.check_fresh(batch.conn)
                yield st
                self.write_deferred()  # what the writer left (it writes them itself first)
        except BaseException:
            group.forget()  # rolled back: the heads it decided were never stored
            raise
        finally:
            self._local.group = None

    # -- deferred use cases of a group commit ----------------------------------------------

    def run_deferred(self, fn: Callable[[], T]) -> T:
        """Run ``fn``, one use case of the group commit open on this thread, without any SQL.

        Every ``transaction()`` inside it is a ``DeferredBatch``: it loads heads (kept from
        group to group, or read once), folds and records events in memory. When ``fn``
        returns, its events join the group's, written by ``write_deferred`` with one
        ``executemany`` per table; when it raises, nothing of it was written, so no savepoint
        is needed. A use case that reaches for the connection (a lookup, a direct write) gets
        ``NeedsConnection``, nothing recorded: the caller writes what the group decided so
        far and runs it again in its own savepoint.
        """
        group: _Group | None = getattr(self._local, "group", None)
        if group is None or getattr(self._local, "scope", None) is not None:
            raise RuntimeError("run_deferred() needs an open group transaction on this thread")
        scope = DeferredBatch(self, group, None)
        self._local.scope = scope
        try:
            result = fn()
        finally:
            self._local.scope = None
        scope.merge()
        return result

    def write_deferred(self, *, savepoint: bool = True) -> None:
        """Write what the group's deferred use cases decided: their events, then every
        projection, in one savepoint (on failure it is rolled back, nothing of it stays,
        the group's loaded heads are forgotten, and the error propagates).

        ``savepoint=False``: nothing was written in the group's transaction yet, so no
        savepoint is opened (SQLite would copy every page the rows touch into its
        sub-journal); a failure then raises ``DeferredWriteFailed``, which leaves the whole
        transaction to roll back (the caller runs the group again).
        """
        group: _Group | None = getattr(self._local, "group", None)
        if group is None or not group.pending:
            return
        conn = self.datastore.connection()
        projections = self.projections
        mark = projections.mark()
        if not savepoint:
            try:
                self._write_pending(conn, group)
            except BaseException as exc:
                projections.undo_to(mark)
                group.forget()
                raise DeferredWriteFailed(str(exc)) from exc
            return
        conn.execute("SAVEPOINT hermes_deferred")
        try:
            self._write_pending(conn, group)
            conn.execute("RELEASE hermes_deferred")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK TO hermes_deferred")
                conn.execute("RELEASE hermes_deferred")
            projections.undo_to(mark)
            group.forget()
            raise

    def _write_pending(self, conn: apsw.Connection, group: _Group) -> None:
        pending = group.pending
        states = group.states
        with translated_errors():
            positions = self.recorder._insert_rows(
                conn, [(s, v, e.topic, ev.encode(e)) for s, v, e in pending]
            )
            changes = [
                Change(position=p, stream=s, version=v, event=e)
                for p, (s, v, e) in zip(positions, pending, strict=True)
            ]
            touched = {s: states[s] for s, _, _ in pending}
            self.projections.apply(conn, changes, touched, group.before)
        group.before.update(touched)  # the rows now stand as the decided states
        pending.clear()

    def forget_deferred_heads(self) -> None:
        """Another use case wrote through this thread's connection (in a savepoint of the
        group, or alone): the heads loaded so far may be stale, load them again (nothing may
        be waiting to be written)."""
        group: _Group | None = getattr(self._local, "heads", None)
        if group is not None:
            assert not group.pending, "write_deferred() first"
            group.forget()

    def close(self) -> None:
        """Close every connection."""
        self.factory.close()


def fold(
    state: SessionState,
    session_id: str,
    events: Sequence[ev.Event],
    expected_version: int | None,
    pending: list[tuple[str, int, ev.Event]],
) -> None:
    """Check ``expected_version``, then fold ``events`` into ``state`` and queue each with its
    version on ``pending`` (``Batch.record`` and ``DeferredBatch.record``)."""
    if expected_version is not None and expected_version != state.version:
        raise ConflictError(
            f"session {session_id} is at version {state.version}, not {expected_version}",
            subject=session_id,
            expected=expected_version,
            actual=state.version,
        )
    for event in events:
        check_text(event, type(event).__name__)  # nothing undecodable reaches the log
        version = state.version + 1
        apply(state, event, version)
        pending.append((session_id, version, event))


class Batch:
    """Events decided inside one transaction, stored and projected when it commits."""

    def __init__(self, store: Store, conn: apsw.Connection) -> None:
        self.store = store
        self.conn = conn
        self.now = float(store.clock())  # an int clock would make head rows differ on rebuild
        self.states: dict[str, SessionState] = {}
        self.before: dict[str, SessionState] = {}
        """Each loaded session's state as it stood (as its row stands) before this batch."""
        self._pending: list[tuple[str, int, ev.Event]] = []
        self._raw: dict[int, tuple[str, bytes]] = {}
        """Stored topic and bytes of replayed events, by their index in ``_pending``."""
        self._windowed: set[str] = set()
        """Sessions whose submission window this batch has read (``load_submissions``)."""

    def load(self, session_id: str) -> SessionState:
        """The current state of a stream (version 0 when it does not exist)."""
        state = self.states.get(session_id)
        if state is not None:
            return state
        rows = self.conn.execute("SELECT head FROM sessions WHERE id = ?", (session_id,)).fetchall()
        state = decode_state(rows[0][0]) if rows else SessionState(session_id=session_id)
        self.states[session_id] = state
        self.before[session_id] = msgspec.structs.replace(state)
        return state

    def load_submissions(self, state: SessionState) -> None:
        """Give a session this batch loaded its submission window (what an admission decides
        against; the head leaves it out), once: admissions the batch folded since are in it."""
        if state.session_id not in self._windowed:
            self._windowed.add(state.session_id)
            with_submissions(self.conn, state)

    def version_of(self, stream: str) -> int:
        """The version of a non-session stream (prompt, receipt)."""
        rows = self.conn.execute(
            "SELECT MAX(originator_version) FROM events WHERE originator_id = ?", (stream,)
        ).fetchall()
        return int(rows[0][0] or 0)

    def record(
        self, session_id: str, events: Sequence[ev.Event], *, expected_version: int | None = None
    ) -> SessionState:
        """Fold ``events`` into the session's state and queue them for storing."""
        state = self.load(session_id)
        fold(state, session_id, events, expected_version, self._pending)
        return state

    def record_other(self, stream: str, events: Sequence[ev.Event]) -> None:
        """Queue events on a stream that has no session state (prompt or receipt streams)."""
        version = self.version_of(stream) + sum(1 for s, _, _ in self._pending if s == stream)
        for event in events:
            check_text(event, type(event).__name__)
            version += 1
            self._pending.append((stream, version, event))

    def replay(self, stream: str, version: int, topic: str, state: bytes) -> None:
        """Queue an event exactly as another store holds it (copying a store): its stream
        version, topic and payload bytes (``state``, uncompressed) are kept; a session stream
        must continue without a gap."""
        event = ev.decode(topic, state)
        if is_session_stream(stream):  # not prompt:, receipt: or gateway: (epochs, claims)
            folded = self.load(stream)
            if version != folded.version + 1:
                raise ConflictError(
                    f"stream {stream} is at version {folded.version}; cannot copy version"
                    f" {version} onto it",
                    subject=stream,
                    expected=version - 1,
                    actual=folded.version,
                )
            apply(folded, event, version)
        self._raw[len(self._pending)] = (topic, state)
        self._pending.append((stream, version, event))

    def discard(self) -> None:
        """Forget queued events and loaded states (after a rollback to a savepoint: states
        are loaded again from the rows as they stand)."""
        self._pending.clear()
        self._raw.clear()
        self.states.clear()
        self.before.clear()

    def flush(self) -> list[Change]:
        """Insert queued events (expected versions enforced by the log) and project them."""
        if not self._pending:
            return []
        stored = [
            StoredEvent(originator_id=s, originator_version=v, topic=e.topic, state=ev.encode(e))
            for s, v, e in self._pending
        ]
        if self._raw:  # replayed events keep their original bytes
            for i, (topic, raw) in self._raw.items():
                s, v, _ = self._pending[i]
                stored[i] = StoredEvent(
                    originator_id=s, originator_version=v, topic=topic, state=raw
                )
            self._raw.clear()
        positions = self.store.recorder._insert_events(self.conn, stored)
        changes = [
            Change(position=p, stream=s, version=v, event=e)
            for p, (s, v, e) in zip(positions, self._pending, strict=True)
        ]
        # From the pending streams, not by scanning every state loaded so far: one long batch
        # (an import) flushes once per session and would otherwise scan them all each time.
        states = self.states
        touched = {s: states[s] for s, _, _ in self._pending if s in states}
        self.store.projections.apply(self.conn, changes, touched, self.before)
        for sid in touched:
            self.before[sid] = msgspec.structs.replace(touched[sid])
        self._pending.clear()
        return changes


class DeferredWriteFailed(Exception):
    """Writing a group's deferred rows failed with no savepoint around them: the group's
    transaction must roll back as a whole (``Store.write_deferred(savepoint=False)``)."""


class NeedsConnection(BaseException):
    """A deferred use case reached for the connection: run it again in its own savepoint.

    A ``BaseException``, so a use case's ``except Exception`` cannot swallow it.
    """


HEADS_KEPT = 4096
"""Most session heads the writer thread keeps between groups."""


class _Group:
    """What the deferred use cases of one group commit decided, not yet written; and the
    heads of the sessions the writer thread loaded, kept from one group to the next while no
    other connection commits (``PRAGMA data_version``) and this thread writes nothing
    outside a group."""

    __slots__ = ("before", "data_version", "pending", "states")

    def __init__(self) -> None:
        self.data_version = -1
        self.states: dict[str, SessionState] = {}
        """Each session as the group decided it so far (replaced, never changed in place)."""
        self.before: dict[str, SessionState] = {}
        """Each session as its row stands."""
        self.pending: list[tuple[str, int, ev.Event]] = []

    def forget(self) -> None:
        self.states.clear()
        self.before.clear()
        self.pending.clear()

    def check_fresh(self, conn: apsw.Connection) -> None:
        """At the start of a group (inside its transaction, so nobody commits meanwhile):
        forget the kept heads when another connection committed since the last group."""
        version = conn.execute("PRAGMA data_version").fetchall()[0][0]
        if version != self.data_version or len(self.states) > HEADS_KEPT:
            self.forget()
            self.data_version = version

    def load(self, store: Store, session_id: str) -> SessionState:
        state = self.states.get(session_id)
        if state is None:
            conn = store.datastore.connection()
            rows = conn.execute("SELECT head FROM sessions WHERE id = ?", (session_id,)).fetchall()
            if rows:
                state = with_submissions(conn, decode_state(rows[0][0]))
            else:
                state = SessionState(session_id=session_id)
            self.states[session_id] = self.before[session_id] = state
        return state


def _own_copy(state: SessionState) -> SessionState:
    """A copy ``apply`` may fold into without changing ``state`` (it extends the active
    ranges in place; every other container it replaces)."""
    return msgspec.structs.replace(state, active=[list(r) for r in state.active])


class _FirstBlock:
    """The first ``transaction()`` block of a deferred use case (``Store.transaction``)."""

    __slots__ = ("scope",)

    def __init__(self, scope: DeferredBatch) -> None:
        self.scope = scope

    def __enter__(self) -> DeferredBatch:
        scope = self.scope
        scope.now = float(scope.store.clock())  # the block's time, as a batch of its own
        return scope

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None:  # nothing of the block stays (the scope held nothing before)
            self.scope.states.clear()
            self.scope.pending.clear()


class DeferredBatch:
    """``Batch`` for a deferred use case: the same ``load``/``record``, no SQL.

    Anything that needs the connection (``conn``, other streams, replays, an explicit
    flush) raises ``NeedsConnection``.
    """

    def __init__(self, store: Store, group: _Group, parent: DeferredBatch | None) -> None:
        self.store = store
        self.group = group
        self.parent = parent
        self.now = float(store.clock())
        self.states: dict[str, SessionState] = {}
        self.pending: list[tuple[str, int, ev.Event]] = []

    def __enter__(self) -> DeferredBatch:
        self.store._local.scope = self
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.store._local.scope = self.parent
        if kind is None:
            self.merge()

    @property
    def conn(self) -> apsw.Connection:
        raise NeedsConnection

    def _decided(self, session_id: str) -> SessionState:
        batch: DeferredBatch | None = self
        while batch is not None:
            state = batch.states.get(session_id)
            if state is not None:
                return state
            batch = batch.parent
        return self.group.load(self.store, session_id)

    def load(self, session_id: str) -> SessionState:
        """The session as decided so far (version 0 when it does not exist)."""
        state = self.states.get(session_id)
        if state is None:
            state = self.states[session_id] = _own_copy(self._decided(session_id))
        return state

    def record(
        self, session_id: str, events: Sequence[ev.Event], *, expected_version: int | None = None
    ) -> SessionState:
        """Fold ``events`` into the session's state and queue them (as ``Batch.record``)."""
        state = self.load(session_id)
        fold(state, session_id, events, expected_version, self.pending)
        return state

    def load_submissions(self, state: SessionState) -> None:
        """Nothing: the group's heads carry their windows (``_Group.load`` reads them)."""

    def version_of(self, stream: str) -> int:
        raise NeedsConnection

    def record_other(self, stream: str, events: Sequence[ev.Event]) -> None:
        raise NeedsConnection

    def replay(self, stream: str, version: int, topic: str, state: bytes) -> None:
        raise NeedsConnection

    def discard(self) -> None:
        raise NeedsConnection

    def flush(self) -> list[Change]:
        raise NeedsConnection

    def merge(self) -> None:
        """The block ended without an error: what it decided joins the enclosing one."""
        parent = self.parent
        if parent is None:
            self.group.states.update(self.states)
            self.group.pending.extend(self.pending)
        else:
            parent.states.update(self.states)
            parent.pending.extend(self.pending)
