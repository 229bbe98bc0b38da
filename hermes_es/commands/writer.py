"""Group commit: one writer thread runs the pending use cases of many sessions in one transaction.

Each use case runs in its own savepoint, so a refusal (a conflict, an invariant) rolls back only
its own events; the transaction then commits once and every caller is acknowledged only after
that commit. A use case is any callable that writes through the store (an engine method, a
``commands`` function): on the writer thread its ``store.transaction()`` becomes a savepoint
inside the group's transaction.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from eventsourcing.persistence import OperationalError

from hermes_es.commands.unit_of_work import Store
from hermes_es.errors import HermesError, StoreBusyError, StoreError

T = TypeVar("T")

MAX_GROUP = 512
"""Most use cases committed by one transaction."""


class _Job:
    __slots__ = ("alone", "fn", "future")

    def __init__(self, fn: Callable[[], Any], alone: bool) -> None:
        self.fn = fn
        self.alone = alone
        self.future: Future[Any] = Future()


_STOP = object()
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
        self._lock = threading.Lock()
        self.groups = 0
        """Transactions committed so far (for benchmarks and tests)."""
        self.jobs = 0
        """Use cases run so far."""

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> GroupWriter:
        """Start the writer thread (idempotent)."""
        with self._lock:
            if self._thread is None:
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

    def on_writer_thread(self) -> bool:
        """True when called from the writer thread (a nested use case runs inline)."""
        return self._thread is not None and threading.current_thread() is self._thread

    # -- submitting --------------------------------------------------------------------------

    def submit(
        self, fn: Callable[[], T], *, alone: bool = False, urgent: bool = False
    ) -> Future[T]:
        """Queue a use case; the future resolves after its group committed.

        ``alone``: run it outside any group transaction (a use case that commits, checkpoints
        or vacuums by itself, such as a verified delete). ``urgent``: a short use case someone
        waits on (an admission); it goes into the next group ahead of the queued ones, so it
        waits for at most the group being committed, not for the whole queue.
        """
        if self._thread is None:
            raise RuntimeError("the writer is not running")
        job = _Job(fn, alone and not urgent)
        if urgent and not alone:
            self._urgent.append(job)
            self._queue.put(_WAKE)
        else:
            self._queue.put(job)
        return job.future

    def call(self, fn: Callable[[], T], *, alone: bool = False) -> T:
        """Run a use case through the writer and return its result once committed."""
        if self.on_writer_thread():
            return fn()
        return self.submit(fn, alone=alone).result()

    # -- the thread --------------------------------------------------------------------------

    def _take(self) -> tuple[list[_Job], bool]:
        jobs: list[_Job] = []
        while not jobs:
            first = self._queue.get()
            self._take_urgent(jobs)
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

    def _take_urgent(self, jobs: list[_Job]) -> None:
        while self._urgent:
            jobs.append(self._urgent.popleft())

    def _run(self) -> None:
        stop = False
        while not stop:
            jobs, stop = self._take()
            if not jobs:
                break
            if jobs[0].alone:
                self._run_alone(jobs[0])
            else:
                self._run_group(jobs)

    def _run_alone(self, job: _Job) -> None:
        self.jobs += 1
        try:
            result = job.fn()
        except BaseException as exc:
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)

    def _run_group(self, jobs: list[_Job]) -> None:
        outcomes: list[tuple[_Job, Any, BaseException | None]] = []
        try:
            # Backend-neutral: the store's own transaction, and nested ones are savepoints
            # (SQLite and PostgreSQL alike).
            with self.store.transaction():
                for job in jobs:
                    try:
                        with self.store.transaction():  # this use case's savepoint
                            result = job.fn()
                    except Exception as exc:
                        outcomes.append((job, None, exc))
                    else:
                        outcomes.append((job, result, None))
        except BaseException as exc:
            # The commit itself failed: nothing of this group is stored.
            failure = _commit_error(self.store, exc)
            for job in jobs:
                job.future.set_exception(failure)
            return
        self.groups += 1
        self.jobs += len(jobs)
        for job, result, error in outcomes:
            if error is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(result)


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
