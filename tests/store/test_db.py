"""Opening state.db and write transactions: settings, privacy, rollback, savepoints, threads."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import apsw
import pytest

from hermes_es.store.db import BUSY_TIMEOUT_MS, open_db
from hermes_es.store.recorder import ApswDatastore, write_transaction


def test_open_db_settings(tmp_path: Path) -> None:
    """A new state.db is 0600 in WAL mode with a busy timeout of seconds and IMMEDIATE writers."""
    db = tmp_path / "sub" / "state.db"
    conn = open_db(db)
    try:
        assert db.stat().st_mode & 0o777 == 0o600
        assert conn.execute("PRAGMA journal_mode").fetchall() == [("wal",)]
        assert conn.execute("PRAGMA busy_timeout").fetchall() == [(BUSY_TIMEOUT_MS,)]
        assert BUSY_TIMEOUT_MS >= 5000
        assert conn.execute("PRAGMA secure_delete").fetchall() == [(1,)]
        assert conn.transaction_mode == "IMMEDIATE"
    finally:
        conn.close()


def test_readonly_open_does_not_create(tmp_path: Path) -> None:
    """Opening a missing file read-only fails instead of creating it."""
    with pytest.raises(apsw.CantOpenError):
        open_db(tmp_path / "missing.db", readonly=True)
    assert not (tmp_path / "missing.db").exists()


def test_write_transaction_commits_and_rolls_back(tmp_path: Path) -> None:
    """The body's writes commit together, or none of them on an exception."""
    conn = open_db(tmp_path / "t.db")
    try:
        conn.execute("CREATE TABLE t (x)")
        with write_transaction(conn):
            conn.execute("INSERT INTO t VALUES (1)")
            assert conn.in_transaction
        assert not conn.in_transaction
        with pytest.raises(RuntimeError), write_transaction(conn):
            conn.execute("INSERT INTO t VALUES (2)")
            raise RuntimeError("boom")
        assert not conn.in_transaction
        assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]
    finally:
        conn.close()


def test_nested_write_transaction_is_a_savepoint(tmp_path: Path) -> None:
    """A failing inner block undoes only its own writes."""
    conn = open_db(tmp_path / "t.db")
    try:
        conn.execute("CREATE TABLE t (x)")
        with write_transaction(conn):
            conn.execute("INSERT INTO t VALUES (1)")
            with pytest.raises(ValueError), write_transaction(conn):
                conn.execute("INSERT INTO t VALUES (2)")
                raise ValueError("inner")
            conn.execute("INSERT INTO t VALUES (3)")
        assert conn.execute("SELECT x FROM t ORDER BY x").fetchall() == [(1,), (3,)]
    finally:
        conn.close()


def test_threads_wait_for_the_lock_without_deadlock(tmp_path: Path) -> None:
    """A thread waiting for the write lock lets the holder (same process) finish and commit."""
    store = ApswDatastore(tmp_path / "t.db")
    try:
        with store.transaction() as conn:
            conn.execute("CREATE TABLE t (x)")
        entered = threading.Event()
        took: list[float] = []

        def waiter() -> None:
            entered.wait()
            start = time.monotonic()
            with store.transaction() as conn:
                conn.execute("INSERT INTO t VALUES (2)")
            took.append(time.monotonic() - start)

        thread = threading.Thread(target=waiter)
        thread.start()
        with store.transaction() as conn:
            entered.set()
            time.sleep(0.2)  # the waiter is now inside SQLite's busy handler
            spin = time.monotonic() + 0.2
            while time.monotonic() < spin:  # Python work needs the GIL
                pass
            conn.execute("INSERT INTO t VALUES (1)")
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert took and took[0] < 5
        assert store.connection().execute("SELECT x FROM t ORDER BY x").fetchall() == [(1,), (2,)]
    finally:
        store.close()
