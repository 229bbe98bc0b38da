"""When writers wake the background WAL checkpointer, and that the WAL restarts after it ran."""

from __future__ import annotations

import time
from pathlib import Path

import apsw

from hermes_es.store.db import write_transaction
from hermes_es.store.recorder import CHECKPOINT_PAGES, INLINE_CHECKPOINT_PAGES, ApswDatastore


def _open(tmp_path: Path) -> tuple[ApswDatastore, list[int], list[int]]:
    """A datastore with a blob table whose WAL sizes (per commit) and wake-ups are recorded."""
    store = ApswDatastore(tmp_path / "state.db")
    conn = store.connection()
    with write_transaction(conn):
        conn.execute("CREATE TABLE blobs (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
    pages: list[int] = []
    wakes: list[int] = []
    hook = store._wal_hook

    def recording_hook(c: apsw.Connection, name: str, n: int) -> int:
        pages.append(n)
        return hook(c, name, n)

    request = store.checkpointer.request

    def recording_request() -> None:
        wakes.append(pages[-1])
        request()

    conn.set_wal_hook(recording_hook)
    store.checkpointer.request = recording_request  # type: ignore[method-assign]
    return store, pages, wakes


def _commit(store: ApswDatastore, n: int = 1) -> None:
    """Commit ``n`` transactions of about five WAL pages each."""
    for _ in range(n):
        with store.transaction() as conn:
            conn.execute("INSERT INTO blobs (body) VALUES (zeroblob(16000))")


def test_a_busy_writer_wakes_the_checkpointer_once_per_threshold_of_growth(
    tmp_path: Path,
) -> None:
    """Back-to-back commits wake the checkpointer once per CHECKPOINT_PAGES of WAL growth."""
    store, pages, wakes = _open(tmp_path)
    try:
        _commit(store, 1200)
        past = sum(1 for n in pages if n >= CHECKPOINT_PAGES)
        assert past > 100  # many commits ended with the WAL past the threshold
        assert wakes and wakes[0] >= CHECKPOINT_PAGES
        assert len(wakes) <= len(pages) * 5 // CHECKPOINT_PAGES + 2
        # The inline backstop holds (it retries after each commit while a background run
        # keeps it busy).
        assert max(pages) < INLINE_CHECKPOINT_PAGES * 3 // 2
    finally:
        store.close()


def test_the_wal_restarts_once_an_idle_writer_lets_the_checkpointer_finish(
    tmp_path: Path,
) -> None:
    """After the background checkpoint finishes, the next commit starts the WAL afresh."""
    store, pages, wakes = _open(tmp_path)
    try:
        while not pages or pages[-1] < CHECKPOINT_PAGES:
            _commit(store)
        assert len(wakes) == 1
        deadline = time.monotonic() + 10
        while store.checkpointer._pending and time.monotonic() < deadline:
            time.sleep(0.01)
        _commit(store)
        assert pages[-1] < 50
        while pages[-1] < CHECKPOINT_PAGES:  # the next threshold wakes it again
            _commit(store)
        assert len(wakes) == 2
    finally:
        store.close()
