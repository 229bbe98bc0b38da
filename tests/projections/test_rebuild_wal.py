"""A rebuild's WAL checkpoints: in a background thread, with the writing thread as backstop."""

from __future__ import annotations

import time
from pathlib import Path

import apsw
import pytest

from hermes_es.projections import rebuild_wal
from hermes_es.projections.rebuild import rebuild, verify
from hermes_es.projections.rebuild_wal import RebuildCheckpoints
from hermes_es.store.db import open_db
from tests.projections.test_rebuild_reader import filled

pytestmark = pytest.mark.sqlite_only

PAGE = 4096


def _fill(conn: apsw.Connection, pages: int) -> None:
    """One transaction writing about ``pages`` new pages."""
    with conn:
        conn.executemany(
            "INSERT INTO t (b) VALUES (zeroblob(?))", [(PAGE - 200,) for _ in range(pages)]
        )


def _wait(check: object, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


def _store(tmp_path: Path) -> apsw.Connection:
    conn = open_db(tmp_path / "wal.db")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB)")
    return conn


def test_background_checkpoint_copies_the_wal_so_it_restarts(tmp_path: Path) -> None:
    """A commit past WAKE_PAGES wakes the thread; its checkpoint lets the next commit restart
    the WAL from the beginning, and the writing thread ran no checkpoint itself."""
    conn = _store(tmp_path)
    checkpoints = RebuildCheckpoints(conn, tmp_path / "wal.db")
    checkpoints.start()
    try:
        _fill(conn, rebuild_wal.WAKE_PAGES + 200)
        assert checkpoints.requests == 1
        grown = checkpoints.wal_pages
        assert grown > rebuild_wal.WAKE_PAGES
        _wait(lambda: not checkpoints.checkpointer._pending)
        _fill(conn, 10)
        checkpoints.after_commit()
        assert checkpoints.wal_pages < grown  # restarted: the thread had copied it all
        assert checkpoints.inline == 0
    finally:
        checkpoints.stop()
        conn.close()


def test_writing_thread_checkpoints_when_the_wal_passes_the_backstop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no background checkpoint, a WAL past INLINE_PAGES is checkpointed after the
    commit by the writing thread, and the next commit restarts the WAL."""
    monkeypatch.setattr(rebuild_wal, "INLINE_PAGES", 300)
    conn = _store(tmp_path)
    checkpoints = RebuildCheckpoints(conn, tmp_path / "wal.db")
    monkeypatch.setattr(checkpoints.checkpointer, "request", lambda: None)
    checkpoints.start()
    try:
        _fill(conn, 100)
        checkpoints.after_commit()
        assert checkpoints.inline == 0
        _fill(conn, 300)
        grown = checkpoints.wal_pages
        checkpoints.after_commit()
        assert checkpoints.inline == 1
        _fill(conn, 10)
        assert checkpoints.wal_pages < grown
    finally:
        checkpoints.stop()
        conn.close()


def test_stop_gives_the_connection_sqlites_checkpoints_back(tmp_path: Path) -> None:
    """After ``stop`` the hook is gone (no request counted) and SQLite's own automatic
    checkpoint keeps the WAL from growing past its threshold again."""
    conn = _store(tmp_path)
    checkpoints = RebuildCheckpoints(conn, tmp_path / "wal.db")
    checkpoints.start()
    checkpoints.stop()
    try:
        _fill(conn, 1500)
        _fill(conn, 10)
        assert checkpoints.requests == 0
        wal = (tmp_path / "wal.db-wal").stat().st_size
        _fill(conn, 10)
        assert (tmp_path / "wal.db-wal").stat().st_size == wal  # restarted, not appended
    finally:
        conn.close()


@pytest.mark.parametrize("reader", [False, True])
def test_rebuild_with_background_checkpoints_verifies_clean(
    home: Path, monkeypatch: pytest.MonkeyPatch, reader: bool
) -> None:
    """A rebuild whose every commit wakes the checkpointer and passes the backstop still
    builds tables that verify clean, and leaves no thread behind."""
    import threading

    monkeypatch.setattr(rebuild_wal, "WAKE_PAGES", 1)
    monkeypatch.setattr(rebuild_wal, "INLINE_PAGES", 2)
    monkeypatch.setattr("hermes_es.projections.rebuild.BATCH", 3)
    db = filled(home)
    rebuild(db, reader=reader)
    assert all(d.equal for d in verify(db))
    assert not any(
        t.name == "hermes-wal-checkpoint" and t.is_alive() for t in threading.enumerate()
    )
