"""Making deleted text leave the disk, and remembering a scrub that another process postponed.

``secure_delete`` zeroes a deleted row where it lies, but SQLite's b-tree balancing leaves
stale copies of rows in the unused space of other pages (a page split copies cells to a sibling
and does not clear them from the original page). Only rewriting the file removes those, so a
delete ends with ``VACUUM`` and a ``TRUNCATE`` checkpoint: the file then holds only live rows,
and the WAL, which held the old page images, is emptied.

Another process holding a read snapshot keeps the checkpoint from completing: the old pages
stay in state.db and its WAL until it lets go. The scrub is then recorded as pending in
``state.db.scrub-pending`` (a time and a reason, no content); ``doctor`` reports it, the next
open retries it, and a small background process (``python -m hermes_es.store.scrub DB``)
finishes it as soon as the reader is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import apsw
import msgspec

PENDING_SUFFIX = ".scrub-pending"
LOCK_SUFFIX = ".scrub-lock"

FINISH_SECONDS = 900.0
"""How long the background finisher keeps retrying before leaving it to the next open."""
FINISH_POLL_SECONDS = 0.1


class PendingScrub(msgspec.Struct, frozen=True, kw_only=True):
    """A scrub that could not complete: when, why, and whether the file still needs VACUUM."""

    since: float
    reason: str
    vacuum: bool = False


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(PendingScrub)


def pending_path(db_path: Path | str) -> Path:
    """Where a pending scrub of ``db_path`` is recorded."""
    db_path = Path(db_path)
    return db_path.with_name(db_path.name + PENDING_SUFFIX)


def pending_scrub(db_path: Path | str) -> PendingScrub | None:
    """The recorded pending scrub, or None (an unreadable record counts as pending)."""
    path = pending_path(db_path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError:
        return PendingScrub(since=0.0, reason="unknown", vacuum=True)
    try:
        return _DECODER.decode(data)
    except msgspec.DecodeError:
        return PendingScrub(since=0.0, reason="unknown", vacuum=True)


def record_pending(db_path: Path | str, reason: str, *, vacuum: bool = False) -> None:
    """Record (or keep the older record of) a pending scrub; the file is private (0600)."""
    old = pending_scrub(db_path)
    since = old.since if old is not None and old.since else time.time()
    entry = PendingScrub(since=since, reason=reason, vacuum=vacuum or bool(old and old.vacuum))
    path = pending_path(db_path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        os.write(fd, _ENCODER.encode(entry))
    finally:
        os.close(fd)
    os.replace(tmp, path)


def clear_pending(db_path: Path | str) -> None:
    """Forget the pending scrub (it completed)."""
    with contextlib.suppress(FileNotFoundError):
        pending_path(db_path).unlink()


def vacuum(conn: apsw.Connection) -> None:
    """Rewrite the file so no stale copy of a deleted row stays in unused page space.

    The copy is built in a temporary file, not in memory: a store can be larger than RAM.
    """
    conn.execute("PRAGMA temp_store=FILE")
    try:
        conn.execute("VACUUM")
    finally:
        conn.execute("PRAGMA temp_store=MEMORY")


def truncate_wal(conn: apsw.Connection, *, wait_ms: int) -> bool:
    """Checkpoint the WAL into the file and truncate it; False while a reader blocks it.

    SQLite returns BUSY at once, without its busy handler, while another connection runs a
    checkpoint (such as this process's background checkpointer), so this retries until
    ``wait_ms`` have passed.
    """
    from hermes_es.store.db import BUSY_TIMEOUT_MS

    deadline = time.monotonic() + wait_ms / 1000
    conn.setbusytimeout(min(wait_ms, 100))
    try:
        while True:
            try:
                conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
                return True
            except (apsw.BusyError, apsw.LockedError):
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.01)
    finally:
        conn.setbusytimeout(BUSY_TIMEOUT_MS)


def scrub(
    conn: apsw.Connection, db_path: Path | str, *, reason: str, wait_ms: int, rewrite: bool = True
) -> bool:
    """Rewrite the file (unless ``rewrite`` is False) and truncate the WAL.

    Returns True when no old copy of anything deleted stays on disk. Otherwise records the
    scrub as pending and returns False (the caller says so, and may start the finisher).
    """
    if rewrite:
        try:
            vacuum(conn)
        except (apsw.BusyError, apsw.LockedError):
            record_pending(db_path, reason, vacuum=True)
            return False
    if not truncate_wal(conn, wait_ms=wait_ms):
        record_pending(db_path, reason)
        return False
    clear_pending(db_path)
    return True


def finish_pending(conn: apsw.Connection, db_path: Path | str, *, wait_ms: int = 0) -> bool:
    """Complete a recorded pending scrub now if nothing blocks it; True when none is left."""
    entry = pending_scrub(db_path)
    if entry is None:
        return True
    return scrub(conn, db_path, reason=entry.reason, wait_ms=wait_ms, rewrite=entry.vacuum)


_LAUNCH = (
    "import subprocess, sys; subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL,"
    " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)"
)


def start_finisher(db_path: Path | str) -> None:
    """Start the background process that completes the pending scrub once readers let go.

    It is started through a short-lived launcher, so it is nobody's child here (no zombie, and
    it outlives this command).
    """
    finisher = [sys.executable, "-m", "hermes_es.store.scrub", str(Path(db_path).absolute())]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [sys.executable, "-c", _LAUNCH, *finisher],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )


def _finish_loop(db_path: Path) -> int:
    """Retry the pending scrub until it completes or FINISH_SECONDS pass (one finisher a store)."""
    from hermes_es.projections.fts import register_tokenizer
    from hermes_es.store.db import open_db

    lock = os.open(db_path.with_name(db_path.name + LOCK_SUFFIX), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another finisher is on it
        deadline = time.monotonic() + FINISH_SECONDS
        while pending_scrub(db_path) is not None and db_path.exists():
            conn = open_db(db_path, hooks=[register_tokenizer])
            try:
                if finish_pending(conn, db_path, wait_ms=int(FINISH_POLL_SECONDS * 1000)):
                    return 0
            except apsw.Error:
                pass
            finally:
                conn.close()
            if time.monotonic() > deadline:
                return 1
            time.sleep(FINISH_POLL_SECONDS)
        return 0
    finally:
        os.close(lock)


if __name__ == "__main__":  # pragma: no cover - run as the background finisher
    sys.exit(_finish_loop(Path(sys.argv[1])))
