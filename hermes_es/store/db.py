"""Opening state.db: WAL, synchronous=NORMAL, busy timeout, IMMEDIATE writers, a read map, 0600."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw

from hermes_es.store.message_text import register_message_text

BUSY_TIMEOUT_MS = 30_000
"""How long a writer waits for another writer before giving up (milliseconds)."""

ConnectionHook = Callable[[apsw.Connection], None]

STATEMENT_CACHE_SIZE = 512
"""Prepared statements APSW keeps per connection. Its cache is a ring that advances once per
statement run, and once per row of an ``executemany``: with APSW's default of 100, a group
commit of 32 appends (about 130 runs) pushed every statement out before the next group, which
prepared each of them again."""


def _create_private(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)


def _use_wal(conn: apsw.Connection) -> None:
    """Switch the file to WAL once; WAL is persistent, so later connections only read it.

    Switching needs an exclusive lock and SQLite may refuse it at once (no busy wait) while
    another connection opening the same new file holds a lock, so the switch is retried.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchall()[0][0]
            if str(mode).lower() == "wal":
                return
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
        except apsw.BusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


MMAP_SIZE = 256 * 1024 * 1024
"""Bytes of state.db each connection reads through a memory map instead of ``read`` calls (the
pages then come straight from the kernel's cache: a few per cent off a frequent word's search,
a fifth off an identifier's, at 100,000 messages). Writes still go through the WAL."""


def open_db(
    path: Path | str, *, readonly: bool = False, hooks: Iterable[ConnectionHook] = ()
) -> apsw.Connection:
    """Open (creating when needed, unless ``readonly``) a state.db with the store's settings."""
    path = Path(path)
    if readonly:
        flags = apsw.SQLITE_OPEN_READONLY
    else:
        if not path.exists():
            _create_private(path)
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    conn = apsw.Connection(str(path), flags=flags, statementcachesize=STATEMENT_CACHE_SIZE)
    conn.setbusytimeout(BUSY_TIMEOUT_MS)
    if not readonly:
        _use_wal(conn)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA secure_delete=ON")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA temp_store=MEMORY")
    conn.execute(f"PRAGMA mmap_size={MMAP_SIZE}")
    conn.transaction_mode = "IMMEDIATE"
    register_message_text(conn)
    for hook in hooks:
        hook(conn)
    return conn


def checkpoint(conn: apsw.Connection, *, truncate: bool = True) -> None:
    """Copy the WAL into the database file (and truncate the WAL so old pages leave the disk)."""
    conn.wal_checkpoint(
        mode=apsw.SQLITE_CHECKPOINT_TRUNCATE if truncate else apsw.SQLITE_CHECKPOINT_PASSIVE
    )


@contextmanager
def write_transaction(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (a savepoint when a transaction is already open).

    The lock is taken with ``execute``, which releases the GIL while SQLite's busy handler
    waits. ``with conn:`` waits holding the GIL, so a second thread of the same process
    waiting for the write lock would stop the holder from ever committing (a deadlock that
    lasts the whole busy timeout).
    """
    if conn.in_transaction:
        with conn:
            yield conn
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@contextmanager
def read_transaction(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """A deferred read transaction: every statement inside reads one WAL snapshot.

    Reuses a transaction that is already open. Reads that must agree with each other (the
    log head and the projections' position, a table and its index) belong inside one.
    """
    if conn.in_transaction:
        yield conn
        return
    snapshot = getattr(conn, "read_snapshot", None)
    if snapshot is not None:  # a server store's connection (store/postgres/connection.py)
        with snapshot():
            yield conn
        return
    conn.execute("BEGIN DEFERRED")
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


def file_uri(path: Path | str, *, immutable: bool = False) -> str:
    """A read-only ``file:`` URI for ``path`` (``immutable`` when no -shm can be created)."""
    from urllib.parse import quote

    query = "mode=ro" + ("&immutable=1" if immutable else "")
    return f"file:{quote(str(Path(path).absolute()))}?{query}"


def open_reader(path: Path | str, *, hooks: Iterable[ConnectionHook] = ()) -> apsw.Connection:
    """Open state.db only for reading: never creates, migrates or writes anything.

    Works on a store the user may not write (a read-only file or directory). A WAL store
    needs its -shm index; when it is missing and cannot be created there (nobody has the
    store open and its directory is read-only), nobody can be writing it either, so it is
    opened as immutable.
    """
    conn = _open_read_only(str(path), apsw.SQLITE_OPEN_READONLY)
    try:
        conn.execute("SELECT 1 FROM sqlite_schema LIMIT 1").fetchall()
    except (apsw.CantOpenError, apsw.ReadOnlyError):
        conn.close()
        flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        conn = _open_read_only(file_uri(path, immutable=True), flags)
    conn.execute("PRAGMA temp_store=MEMORY")
    register_message_text(conn)
    for hook in hooks:
        hook(conn)
    return conn


def _open_read_only(name: str, flags: int) -> apsw.Connection:
    conn = apsw.Connection(name, flags=flags)
    conn.setbusytimeout(BUSY_TIMEOUT_MS)
    return conn
