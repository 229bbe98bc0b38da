"""The bulk write path: many small units (one session each) in few write transactions.

A migration that commits once per session spends most of its time committing (a WAL frame
write and lock hand-off per session). ``GroupedUnits`` keeps one write transaction open across
units until about ``max_messages`` messages are in it; the caller calls ``commit_if_due``
between units, which commits a full group (the next unit opens a new one). Each unit runs
inside its own SAVEPOINT: a unit that fails is rolled back alone (its events, its projection
rows and the batch's in-memory states) and the group goes on, so a caller can skip that
session and report it exactly as it did with one transaction each.

The group's full-text rows are written once, when it commits (``ProjectionSet.deferred_index``,
as the gateway's group commit does): FTS5 writes its pending rows out as a new index segment at
every SAVEPOINT, which made one tiny segment per session, most of a migration's CPU time and an
index of many segments that every later search probes.

Into a store that holds no session yet (a first migration) the full-text index is filled as
a rebuild fills it (``ProjectionSet.begin_fill``): FTS5 merges no segment while a group writes
its rows, and once every group is committed the segments are merged into one in short
transactions of their own (``merge_fill``). Each group sets the fill options when it opens
and puts FTS5's defaults back before it commits, so a killed migration never leaves them set.

What a crash loses is the uncommitted group, never a committed one; a re-run skips the
sessions already present, as before, and resumes with the first group not committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import TracebackType

from eventsourcing.persistence import IntegrityError

from hermes_es.commands.unit_of_work import Batch, Store
from hermes_es.errors import ConflictError

GROUP_MESSAGES = 5_000
"""Messages per write transaction (the batch size rebuild replays with)."""
GROUP_UNITS = 500
"""Units per write transaction at most (sessions with few or no messages)."""

_SAVEPOINT = "bulk_unit"


class GroupedUnits:
    """Runs units in shared write transactions; use as a context manager around the loop."""

    def __init__(
        self, store: Store, *, max_messages: int = GROUP_MESSAGES, max_units: int = GROUP_UNITS
    ) -> None:
        self.store = store
        self.max_messages = max_messages
        self.max_units = max_units
        self.committed_units = 0
        self._stack: ExitStack | None = None
        self._batch: Batch | None = None
        self._messages = 0
        self._units = 0
        self._fill: bool | None = None
        """Whether the index is filled as a rebuild fills it (decided by the first group)."""

    def _open(self) -> Batch:
        if self._batch is None:
            stack = ExitStack()
            batch = stack.enter_context(self.store.transaction())
            projections = self.store.projections
            if self._fill is None:
                self._fill = fill_if_empty(stack, self.store, batch)
            elif self._fill:
                fill_index(stack, self.store, batch)
            deferred_index = getattr(projections, "deferred_index", None)
            if deferred_index is not None:  # exits first: the index rows, then the commit
                stack.enter_context(deferred_index(batch.conn))
            self._batch = batch
            self._stack = stack
        return self._batch

    @contextmanager
    def unit(self, messages: int = 0) -> Iterator[Batch]:
        """One unit of work (e.g. one session) inside the current group's transaction.

        Its events are written and projected when the block ends; an exception rolls back
        this unit only and propagates (the group's other units stay).
        """
        batch = self._open()
        conn = batch.conn
        projections = self.store.projections
        mark = projections.mark() if hasattr(projections, "mark") else -1
        conn.execute(f"SAVEPOINT {_SAVEPOINT}")
        try:
            yield batch
            batch.flush()
        except BaseException as exc:
            conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
            conn.execute(f"RELEASE {_SAVEPOINT}")
            if mark >= 0:
                projections.undo_to(mark)  # the index rows it deferred go too
            batch.discard()
            if isinstance(exc, IntegrityError):
                raise ConflictError.lost_race(exc) from exc
            raise
        conn.execute(f"RELEASE {_SAVEPOINT}")
        self._units += 1
        self._messages += messages

    def commit_if_due(self) -> None:
        """Commit when the group is full. Call it between units, outside any handler that
        reports a unit's own failure: a failed commit loses the whole group, not one unit."""
        if self._messages >= self.max_messages or self._units >= self.max_units:
            self.commit()

    def commit(self) -> None:
        """Commit the open group (if any); the next unit opens a new one."""
        stack, self._stack, self._batch = self._stack, None, None
        units, self._units, self._messages = self._units, 0, 0
        if stack is not None:
            stack.close()
            self.committed_units += units

    def rollback(self, exc: BaseException) -> None:
        """Abandon the open group (its units are not stored)."""
        stack, self._stack, self._batch = self._stack, None, None
        self._units = self._messages = 0
        if stack is not None:
            stack.__exit__(type(exc), exc, exc.__traceback__)

    def __enter__(self) -> GroupedUnits:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.commit()
            if self._fill:
                self._merge_filled()
        else:
            self.rollback(exc)

    def _merge_filled(self) -> None:
        """Merge the segments the groups' fill left, one bounded step a transaction."""
        merge_filled(self.store)


def fill_index(stack: ExitStack, store: Store, batch: Batch) -> None:
    """The full-text index of ``batch``'s transaction is filled as a rebuild fills it
    (``ProjectionSet.begin_fill``), and FTS5's defaults are put back when ``stack`` closes
    without an error: enter the transaction on ``stack`` first and the deferred index after
    this, so the index rows are written, then the defaults put back, then the commit."""
    projections = store.projections
    conn = batch.conn
    projections.begin_fill(conn)

    def end_fill(kind: type[BaseException] | None, *exc: object) -> bool:
        if kind is None:  # after the transaction's index rows, before its commit
            projections.end_fill(conn)
        return False

    stack.push(end_fill)


def fill_if_empty(stack: ExitStack, store: Store, batch: Batch) -> bool:
    """``fill_index`` when the store holds no session yet (and its projections can fill);
    True when it does (then ``merge_filled`` once the transaction committed)."""
    projections = store.projections
    if not hasattr(projections, "begin_fill"):
        return False
    if batch.conn.execute("SELECT 1 FROM sessions LIMIT 1").fetchall():
        return False
    fill_index(stack, store, batch)
    return True


def merge_filled(store: Store) -> None:
    """Merge the segments a fill left into one, one bounded step a transaction."""
    more = True
    while more:
        with store.transaction() as batch:
            more = store.projections.merge_fill(batch.conn)
