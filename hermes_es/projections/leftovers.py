"""What an interrupted maintenance run leaves behind, cleaned up when the store is next opened.

A ``rebuild-projections`` that was killed leaves its half-built ``rebuild_*`` tables (copies of
message text); an older hermes's ``verify`` that was killed left ``.verify-*.db`` scratch files
next to state.db. Every open checks for both (one schema query and one directory listing) and
removes them: tables are dropped with their pages zeroed, files are overwritten with zeros
before they are unlinked, and the WAL is truncated. A rebuild still running in another process
holds ``state.db.rebuild-lock``; its tables are left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw

from hermes_es.errors import HolderError
from hermes_es.store.db import write_transaction

REBUILD_PREFIX = "rebuild_"
LOCK_SUFFIX = ".rebuild-lock"
VERIFY_SCRATCH_PREFIX = ".verify-"
LEFTOVER_SCRUB_WAIT_MS = 200


def lock_path(db_path: Path | str) -> Path:
    """The lock file a running rebuild holds."""
    db_path = Path(db_path)
    return db_path.with_name(db_path.name + LOCK_SUFFIX)


@contextmanager
def rebuild_lock(db_path: Path | str) -> Iterator[None]:
    """Hold the rebuild lock (an flock, released by the kernel even on SIGKILL)."""
    fd = os.open(lock_path(db_path), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HolderError(
                f"another 'hermes sessions rebuild-projections' is running on {db_path}; "
                "wait for it to finish",
                subject=str(db_path),
            ) from None
        yield
    finally:
        os.close(fd)


def rebuild_running(db_path: Path) -> bool:
    """True while another process holds the rebuild lock (or when that cannot be told)."""
    try:
        fd = os.open(lock_path(db_path), os.O_RDWR)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: leave the tables alone
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def leftover_tables(conn: apsw.Connection, schema: str = "main") -> list[str]:
    """Tables of an unfinished rebuild, virtual (FTS) tables first."""
    rows = conn.execute(
        f"SELECT name, sql LIKE 'CREATE VIRTUAL%' FROM {schema}.sqlite_schema"
        " WHERE type = 'table' AND name LIKE 'rebuild\\_%' ESCAPE '\\'"
        " ORDER BY 2 DESC, name"
    ).fetchall()
    return [str(r[0]) for r in rows]


SHM_DMS_BYTE = 128
"""Offset of the -shm "dead man switch" byte: every open WAL connection holds a read lock on it."""


def _in_use(scratch: Path) -> bool:
    """True while some process still has this scratch database open (its -shm is locked)."""
    shm = scratch.with_name(scratch.name + "-shm")
    try:
        fd = os.open(shm, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, SHM_DMS_BYTE)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, SHM_DMS_BYTE)
        return False
    finally:
        os.close(fd)


def stale_scratch_files(db_path: Path) -> list[Path]:
    """``.verify-*.db`` scratch files (and their -wal/-shm/-journal) an older verify left.

    A scratch database some process still has open (an older hermes's verify running now) is
    not stale, nor is the file being opened itself.
    """
    try:
        names = os.listdir(db_path.parent)
    except OSError:
        return []
    found = [
        db_path.parent / n
        for n in names
        if n.startswith(VERIFY_SCRATCH_PREFIX) and ".db" in n and not n.endswith(".tmp")
    ]
    bases = {p.with_name(p.name.split(".db", 1)[0] + ".db") for p in found}
    live = {b for b in bases if b.name == db_path.name or _in_use(b)}
    return [p for p in found if p.with_name(p.name.split(".db", 1)[0] + ".db") not in live]


def _shred(path: Path) -> None:
    """Overwrite a file with zeros, then unlink it."""
    with contextlib.suppress(OSError):
        size = path.stat().st_size
        fd = os.open(path, os.O_WRONLY)
        try:
            chunk = b"\0" * 65536
            left = size
            while left > 0:
                left -= os.write(fd, chunk[: min(left, len(chunk))])
            os.fsync(fd)
        finally:
            os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def drop_tables(conn: apsw.Connection, tables: list[str]) -> None:
    """Drop tables in one write transaction with ``secure_delete`` on (pages zeroed)."""
    with write_transaction(conn):
        conn.execute("PRAGMA secure_delete = ON")
        for table in tables:
            # Dropping an FTS table drops its shadow tables too.
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')


def clean_leftovers(conn: apsw.Connection) -> bool:
    """Remove what a killed rebuild or verify left; returns True when something was removed.

    Also retries a pending post-delete scrub without waiting (see ``hermes_es.store.scrub``).
    """
    name = conn.filename
    if not name or conn.readonly("main"):
        return False
    db_path = Path(name)
    from hermes_es.store.scrub import finish_pending, pending_path, scrub

    removed = False
    for path in stale_scratch_files(db_path):
        _shred(path)
        removed = True
    tables = leftover_tables(conn)
    if tables and not conn.in_transaction and not rebuild_running(db_path):
        drop_tables(conn, tables)
        removed = True
    if removed:
        scrub(conn, db_path, reason="leftovers", wait_ms=LEFTOVER_SCRUB_WAIT_MS, rewrite=False)
    elif pending_path(db_path).exists() and not conn.in_transaction:
        with contextlib.suppress(apsw.Error):
            finish_pending(conn, db_path)
    return removed
