"""Group commit: one writer thread runs the pending use cases of many sessions in one transaction.

A refusal (a conflict, an invariant) undoes only its own use case; the transaction then commits
once and every caller is acknowledged only after that commit. A use case is any callable that
writes through the store (an engine method, a ``commands`` function): on the writer thread its
``store.transaction()`` becomes a savepoint inside the group's transaction.

A use case submitted as ``pure`` (it reads and writes only through the store's batches: an
append, a turn admission) is instead decided in memory, against the heads the group loaded and
what the group decided before it, with no SQL (``Store.run_deferred``); the group's events and
projection rows are then written together, one ``executemany`` per table. A refusal records
nothing, so it needs no savepoint either. A pure use case that reaches for the connection (a
uid lookup, an error that checks the log) runs again in its own savepoint, after what the
group decided so far was written; should writing the deferred rows ever fail, they are rolled
back and their use cases run again, each in its own savepoint (the group's first write has no
savepoint of its own: its failure rolls the whole transaction back, and every use case of the
group runs again that way in a new one).

Acknowledging is part of the writer's cost, so each kind of caller is woken the cheapest way
it can be: a thread blocked in ``call`` waits on a plain lock the writer releases; the callers
of one event loop (``submit_async``, the gateway's own writes) are resolved together by one
``call_soon_threadsafe`` per loop per group, not one wake-up each; ``submit`` keeps returning
a ``concurrent.futures.Future`` for everyone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar, cast

from eventsourcing.persistence import OperationalError

from hermes_es.commands.unit_of_work import DeferredWriteFailed, NeedsConnection, Store
from hermes_es.errors import HermesError, StoreBusyError, StoreError
from hermes_es.projections.base import Change

T = TypeVar("T")
log = logging.getLogger("hermes.writer")

MAX_GROUP = 512
"""Most use cases committed by one transaction."""


class _Job:
    """One use case and how its caller hears the outcome (exactly one of the three ways)."""

    __slots__ = (
        "alone",
        "error",
        "fn",
        "future",
        "lock",
        "loop",
        "pure",
        "result",
        "then",
        "waiter",
    )

    def __init__(self, fn: Callable[[], Any], alone: bool, pure: bool = False) -> None:
        self.fn = fn
        self.alone = alone
        self.pure = pure and not alone
        """Reads and writes only through the store's batches, and may run again: decided
        without SQL, its rows written with the group's (``Store.run_deferred``)."""
        self.future: Future[Any] | None = None
        """``submit``: a concurrent future."""
        self.lock: threading.Lock | None = None
        """``call``: held until the outcome is set (the caller blocks acquiring it)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        self.waiter: asyncio.Future[Any] | None = None
        """``submit_async``: a future of ``loop``, resolved on that loop."""
        self.then: Callable[[Any], None] | None = None
        """``submit_async``: called with the result on the loop, in the hand-back itself."""
        self.result: Any = None
        self.error: BaseException | None = None


Listener = Callable[[list[Change]], None]
"""Hears, on its event loop, the changes each group stored, once the group committed."""


def _resolve_on_loop(
    jobs: list[_Job], listeners: list[Listener] | None = None, changes: list[Change] | None = None
) -> None:
    """On the callers' event loop: tell the listeners what the group stored, then resolve
    every waiter of the group (one wake-up for all)."""
    if listeners and changes:
        for listener in listeners:
            try:
                listener(changes)
            except Exception:  # a listener's failure must not keep callers waiting
                log.exception("a commit listener failed")
    for job in jobs:
        waiter = job.waiter
        if waiter is None or waiter.done():  # the caller gave up (cancelled)
            continue
        if job.error is not None:
            waiter.set_exception(job.error)
        else:
            if job.then is not None:
                try:
                    job.then(job.result)
                except Exception:
                    log.exception("a hand-back callback failed")
            waiter.set_result(job.result)


class _Inbox:
    """What the writer hands one event loop. A wake-up (``call_soon_threadsafe``, a write to
    the loop's self-pipe) is sent only when the loop has not yet been woken for what is
    already waiting: a busy loop drains several groups with one wake-up."""

    __slots__ = ("items", "loop", "scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.items: deque[tuple[list[_Job], list[Listener] | None, list[Change] | None]] = deque()
        self.scheduled = False

    def put(
        self, jobs: list[_Job], heard: list[Listener] | None, changes: list[Change] | None
    ) -> None:
        """On the writer thread: queue one group's outcome for the loop."""
        self.items.append((jobs, heard, changes))
        if not self.scheduled:  # the loop clears it before it drains: nothing is missed
            self.scheduled = True
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # a closed loop: nobody waits any more, keep nothing
                self.items.clear()
                self.scheduled = False

    def _drain(self) -> None:
        self.scheduled = False
        while self.items:
            _resolve_on_loop(*self.items.popleft())


def _wake(jobs: list[_Job]) -> None:
    """Wake the callers blocked in ``call`` or waiting on a ``submit`` future."""
    for job in jobs:
        if job.lock is not None:
            job.lock.release()
        elif job.future is not None:
            if job.error is not None:
                job.future.set_exception(job.error)
            else:
                job.future.set_result(job.result)


class _Waker:
    """Wakes the threads that wait on a group's outcome, on a thread of its own.

    Each wake-up is a futex call that may hand the waking thread's CPU to the woken one:
    done by the writer, a group of 15 callers cost it about a fifth of its time. The writer
    hands this thread the group's list (one wake-up, none while it is still busy with the
    previous one) and goes on with the next group.
    """

    __slots__ = ("_busy", "_lock", "_pending", "_signal", "_thread")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[_Job] = []
        self._busy = False
        self._signal = threading.Lock()
        """Held while the thread has nothing to do; released (once) by ``put`` to wake it: a
        plain lock, the cheapest wake-up there is (a ``Semaphore`` adds a ``Condition``)."""
        self._signal.acquire()
        self._thread = threading.Thread(target=self._run, name="hermes-writer-wake", daemon=True)
        self._thread.start()

    def put(self, jobs: list[_Job]) -> None:
        """Wake these callers soon (in this order, after every earlier ``put``)."""
        with self._lock:
            self._pending.extend(jobs)
            if self._busy:
                return  # the thread takes them on its next pass
            self._busy = True
        self._signal.release()  # one release per time the thread went idle: never twice

    def _run(self) -> None:
        while True:
            self._signal.acquire()
            while True:
                with self._lock:
                    jobs, self._pending = self._pending, []
                    if not jobs:
                        self._busy = False
                        break
                if jobs[-1] is _STOP_WAKER:
                    _wake(jobs[:-1])
                    return
                _wake(jobs)

    def stop(self) -> None:
        """Wake whatever is still pending, then end the thread."""
        self.put([_STOP_WAKER])
        self._thread.join()


def _deliver(
    jobs: list[_Job],
    inbox: Callable[[asyncio.AbstractEventLoop], _Inbox],
    listeners: dict[asyncio.AbstractEventLoop, list[Listener]] | None = None,
    changes: list[Change] | None = None,
    waker: _Waker | None = None,
) -> None:
    """Tell each caller its use case's outcome (after the commit, or after the failure), and
    each listener the changes the group stored: at most one wake-up per loop; threads are
    woken by ``waker`` when there is one."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
    if listeners and changes:
        by_loop = {loop: [] for loop in listeners}
    threads: list[_Job] = []
    for job in jobs:
        if job.loop is not None:
            by_loop.setdefault(job.loop, []).append(job)
        else:
            threads.append(job)
    for loop, waiting in by_loop.items():
        heard = listeners.get(loop) if listeners and changes else None
        inbox(loop).put(waiting, heard, changes)
    if threads:
        if waker is None:
            _wake(threads)
        else:
            waker.put(threads)


_STOP = object()
_STOP_WAKER = cast("_Job", object())
"""Ends the waker thread (after the callers queued before it are woken)."""
_WAKE = object()
"""Queued behind an urgent job: wakes the writer (the job itself waits in the urgent lane)."""


class GroupWriter:
    """The single writer of a store: ``call`` and ``submit`` use cases, committed in groups."""

    def __init__(self, store: Store, *, max_group: int = MAX_GROUP) -> None:
        self.store = store
        self.max_group = max_group
        self._queue: queue.SimpleQueue[_Job | object] = queue.SimpleQueue()
        self._urgent: deque[_Job] = deque()
        """Short use cases a caller waits on (an admission): first into the next group."""
        self._thread: threading.Thread | None = None
        self._waker: _Waker | None = None
        self._lock = threading.Lock()
        self.groups = 0
        """Transactions committed so far (for benchmarks and tests)."""
        self.jobs = 0
        """Use cases run so far."""
        self.group_sizes: dict[int, int] = {}
        """How many committed groups had each number of use cases (for benchmarks)."""
        self.deferred = 0
        """Use cases decided without SQL and written with their group's rows."""
        self._listeners: dict[asyncio.AbstractEventLoop, list[Listener]] = {}
        self._inboxes: dict[asyncio.AbstractEventLoop, _Inbox] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> GroupWriter:
        """Start the writer thread (idempotent)."""
        with self._lock:
            if self._thread is None:
                self._waker = _Waker()
                self._thread = threading.Thread(target=self._run, name="hermes-writer", daemon=True)
                self._thread.start()
        return self

    def stop(self) -> None:
        """Finish the queued use cases, then stop the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(_STOP)
            thread.join()
            waker, self._waker = self._waker, None
            if waker is not None:
                waker.stop()

    @property
    def reports_changes(self) -> bool:
        """True when listeners hear what each group stored (a store with group transactions:
        SQLite); otherwise callers must read what changed back from the log."""
        return hasattr(self.store, "group_transaction")

    def listen(self, listener: Listener) -> None:
        """Call ``listener(changes)`` on the running event loop after each group commit, with
        the changes the group stored (log order), before that loop's waiters of the group
        are resolved (so a caller that resumes finds them already handled)."""
        loop = asyncio.get_running_loop()
        self._listeners = {**self._listeners, loop: [*self._listeners.get(loop, []), listener]}

    def on_writer_thread(self) -> bool:
        """True when called from the writer thread (a nested use case runs inline)."""
        return self._thread is not None and threading.current_thread() is self._thread

    # -- submitting --------------------------------------------------------------------------

    def _enqueue(self, job: _Job, urgent: bool) -> None:
        if self._thread is None:
            raise RuntimeError("the writer is not running")
        if urgent and not job.alone:
            self._urgent.append(job)
            self._queue.put(_WAKE)
        else:
            self._queue.put(job)

    def submit(
        self, fn: Callable[[], T], *, alone: bool = False, urgent: bool = False, pure: bool = False
    ) -> Future[T]:
        """Queue a use case; the future resolves after its group committed.

        ``alone``: run it outside any group transaction (a use case that commits, checkpoints
        or vacuums by itself, such as a verified delete). ``urgent``: a short use case someone
        waits on (an admission); it goes into the next group ahead of the queued ones, so it
        waits for at most the group being committed, not for the whole queue, and that
        group holds only the urgent use cases waiting then (and at most one queued one).
        ``pure``: the use case reads and writes only through ``store.transaction()`` batches
        and has no other effect, so it may be decided without SQL and run again
        (``Store.run_deferred``).
        """
        job = _Job(fn, alone and not urgent, pure)
        future: Future[T] = Future()
        job.future = future
        self._enqueue(job, urgent)
        return future

    def submit_async(
        self,
        fn: Callable[[], T],
        *,
        alone: bool = False,
        urgent: bool = False,
        pure: bool = False,
        then: Callable[[T], None] | None = None,
    ) -> asyncio.Future[T]:
        """``submit`` for a caller on the running event loop: an asyncio future of that loop.

        The writer resolves every such future of one group with a single
        ``call_soon_threadsafe``, after the commit. Cancelling the future does not undo the
        use case (it may already be committed); its outcome is then dropped.
        """
        loop = asyncio.get_running_loop()
        job = _Job(fn, alone and not urgent, pure)
        waiter: asyncio.Future[T] = loop.create_future()
        job.loop, job.waiter, job.then = loop, waiter, then
        self._enqueue(job, urgent)
        return waiter

    def call(self, fn: Callable[[], T], *, alone: bool = False, pure: bool = False) -> T:
        """Run a use case through the writer and return its result once committed
        (``pure``: as for ``submit``)."""
        if self.on_writer_thread():
            return fn()
        job = _Job(fn, alone, pure)
        lock = threading.Lock()
        lock.acquire()
        job.lock = lock
        self._enqueue(job, False)
        lock.acquire()  # released by the writer once the outcome is known
        if job.error is not None:
            raise job.error
        result: T = job.result
        return result

    # -- the thread --------------------------------------------------------------------------

    def _take(self) -> tuple[list[_Job], bool]:
        jobs: list[_Job] = []
        urgent = False
        while not jobs:
            first = self._queue.get()
            urgent = self._take_urgent(jobs) or urgent
            if first is _STOP:
                return jobs, True
            if first is _WAKE:
                continue  # its job is already in ``jobs`` (or ran in an earlier group)
            assert isinstance(first, _Job)
            if first.alone:
                if jobs:
                    self._queue.put(first)  # runs after this group, by itself
                    return jobs, False
                return [first], False
            jobs.append(first)
        if urgent:
            # Urgent use cases (admissions) commit in a small group of their own: the queued
            # ones wait for the next group instead of lengthening this one.
            return jobs, False
        stop = False
        while len(jobs) < self.max_group:
            try:
                nxt = self._queue.get_nowait()
            except queue.Empty:
                break
            if nxt is _STOP:
                stop = True
                break
            if nxt is _WAKE:
                self._take_urgent(jobs)
                continue
            assert isinstance(nxt, _Job)
            if nxt.alone:
                self._queue.put(nxt)  # runs after this group, by itself
                break
            jobs.append(nxt)
        return jobs, stop

    def _take_urgent(self, jobs: list[_Job]) -> bool:
        took = False
        while self._urgent:
            jobs.append(self._urgent.popleft())
            took = True
        return took

    def _run(self) -> None:
        datastore = getattr(self.store, "datastore", None)
        later: Callable[[], contextlib.AbstractContextManager[None]] = getattr(
            datastore, "checkpoints_later", contextlib.nullcontext
        )
        checkpoint: Callable[[], None] | None = getattr(datastore, "checkpoint_if_overdue", None)
        stop = False
        while not stop:
            jobs, stop = self._take()
            if not jobs:
                break
            if jobs[0].alone:
                self._run_alone(jobs[0])
                continue
            with later():
                self._run_group(jobs)
            if checkpoint is not None:
                checkpoint()  # after the callers were told: they need not wait for its syncs

    def _run_alone(self, job: _Job) -> None:
        self.jobs += 1
        try:
            job.result = job.fn()
        except BaseException as exc:
            job.error = exc
        forget = getattr(self.store, "forget_deferred_heads", None)
        if forget is not None:
            forget()  # it wrote as it pleased: the heads kept for the next group may be stale
        _deliver([job], self._inbox, waker=self._waker)

    def _inbox(self, loop: asyncio.AbstractEventLoop) -> _Inbox:
        inbox = self._inboxes.get(loop)
        if inbox is None:
            inbox = self._inboxes[loop] = _Inbox(loop)
        return inbox

    @contextlib.contextmanager
    def _group(self) -> Iterator[list[Change]]:
        """The group's transaction; yields the list of what it stored (when the store says).

        Backend-neutral: the store's own transaction, and nested ones are savepoints (SQLite
        and PostgreSQL alike). A store with a group transaction (SQLite) writes what it can
        defer (the full-text index) once for the whole group and reports what it stored.
        """
        group: Callable[[], contextlib.AbstractContextManager[list[Change]]] | None = getattr(
            self.store, "group_transaction", None
        )
        if group is not None:
            with group() as stored:
                yield stored
        else:
            with self.store.transaction():
                yield []

    def _run_group(self, jobs: list[_Job]) -> None:
        try:
            try:
                with self._group() as stored:
                    self._run_jobs(jobs)
            except DeferredWriteFailed:
                # The group's first batched write failed, with no savepoint around it: the
                # whole transaction rolled back. Every use case runs again, each in its own
                # savepoint, in a new transaction.
                log.warning("writing a group's deferred use cases failed; running them one by one")
                with self._group() as stored:
                    for job in jobs:
                        self._run_in_savepoint(job)
                        self.store.forget_deferred_heads()
        except BaseException as exc:
            # The commit itself failed: nothing of this group is stored.
            failure = _commit_error(self.store, exc)
            for job in jobs:
                job.result, job.error = None, failure
            _deliver(jobs, self._inbox, waker=self._waker)
            return
        self.groups += 1
        self.jobs += len(jobs)
        self.group_sizes[len(jobs)] = self.group_sizes.get(len(jobs), 0) + 1
        # Only now: every acknowledgement follows the commit.
        _deliver(jobs, self._inbox, self._listeners, stored, self._waker)

    def _run_jobs(self, jobs: list[_Job]) -> None:
        deferring = getattr(self.store, "run_deferred", None) is not None
        since_write: list[_Job] = []
        """The deferred use cases whose events are not written yet (with the ones they
        refused, in order: what is run again if writing them fails)."""
        wrote = False
        """Something was written in the group's transaction (later writes need a savepoint
        of their own to fail alone)."""
        for job in jobs:
            if job.pure and deferring and self._run_deferred(job):
                since_write.append(job)
                continue
            # It reads or writes through the connection: first write what the group decided
            # so far, then run it in its own savepoint.
            wrote = self._write_deferred(since_write, wrote) or wrote
            since_write = []
            self._run_in_savepoint(job)
            wrote = True
            if deferring:
                self.store.forget_deferred_heads()
        self._write_deferred(since_write, wrote)

    def _run_in_savepoint(self, job: _Job) -> None:
        job.result, job.error = None, None
        try:
            with self.store.transaction():  # this use case's savepoint
                job.result = job.fn()
        except Exception as exc:
            job.error = exc

    def _run_deferred(self, job: _Job) -> bool:
        """Decide a pure use case without SQL (``Store.run_deferred``); False when it needs the
        connection (nothing of it was recorded: it runs again in a savepoint)."""
        try:
            job.result = self.store.run_deferred(job.fn)
        except NeedsConnection:
            return False
        except Exception as exc:  # a refusal: nothing of it was recorded
            job.result, job.error = None, exc
        self.deferred += 1
        return True

    def _write_deferred(self, since_write: list[_Job], wrote: bool) -> bool:
        """Write the events the deferred use cases decided (one ``executemany`` per table);
        True when there were any.

        Should that fail (it should not: the writer holds the write lock and decided every
        version itself), it is rolled back and those use cases run again, each in its own
        savepoint, so one refusal still does not undo the others. The group's first write
        (``wrote`` False) has no savepoint of its own: its failure rolls the whole
        transaction back (``DeferredWriteFailed``) and ``_run_group`` runs the group again.
        """
        if not since_write:
            return False
        if not wrote:
            self.store.write_deferred(savepoint=False)
            return True
        try:
            self.store.write_deferred()
        except Exception:
            log.warning("writing a group's deferred use cases failed; running them one by one")
            for job in since_write:
                self._run_in_savepoint(job)
            self.store.forget_deferred_heads()
        return True


def _commit_error(store: Store, exc: BaseException) -> BaseException:
    """The error every caller of a failed group commit sees."""
    if isinstance(exc, HermesError):
        return exc
    if isinstance(exc, OperationalError):
        return StoreBusyError(
            f"state.db at {store.path} stayed locked by another process; nothing was changed",
            subject=str(store.path),
        )

    err = StoreError(
        f"could not commit to state.db at {store.path}: {exc}; nothing of this batch was changed",
        subject=str(store.path),
    )
    err.__cause__ = exc
    return err
