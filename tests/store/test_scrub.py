"""The post-delete scrub: what secure_delete leaves in page gaps, and pending scrubs."""

from __future__ import annotations

import random
from pathlib import Path

import apsw

from hermes_es.store.db import open_db
from hermes_es.store.scrub import (
    PendingScrub,
    finish_pending,
    pending_path,
    pending_scrub,
    record_pending,
    scrub,
)


def fill(db: Path) -> apsw.Connection:
    """Rows inserted out of order (b-tree balancing moves cells), a third of them marked."""
    conn = open_db(db)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, doomed INTEGER, body TEXT)")
    rng = random.Random(5)
    ids = list(range(1, 2001))
    rng.shuffle(ids)
    with conn:
        for i in ids:
            word = f"GONE{i:05d}" if i % 3 == 0 else f"kept{i:05d}"
            conn.execute(
                "INSERT INTO t VALUES (?, ?, ?)", (i, i % 3 == 0, word * rng.randint(5, 60))
            )
    with conn:
        conn.execute("DELETE FROM t WHERE doomed")
    return conn


def copies(db: Path) -> int:
    """How many copies of deleted rows the store's files hold."""
    return sum(p.read_bytes().count(b"GONE") for p in db.parent.glob(db.name + "*"))


def test_secure_delete_alone_leaves_stale_copies_in_page_gaps(tmp_path: Path) -> None:
    """The premise: with secure_delete on, balancing still leaves copies in unused page space."""
    db = tmp_path / "state.db"
    conn = fill(db)
    try:
        conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        assert conn.execute("SELECT COUNT(*) FROM t WHERE body LIKE '%GONE%'").fetchall() == [(0,)]
        assert copies(db) > 0
    finally:
        conn.close()


def test_scrub_leaves_no_copy_of_deleted_rows(tmp_path: Path) -> None:
    """scrub() rewrites the file and truncates the WAL: no copy of a deleted row is left."""
    db = tmp_path / "state.db"
    conn = fill(db)
    try:
        assert scrub(conn, db, reason="delete", wait_ms=1000)
        assert copies(db) == 0
        assert conn.execute("SELECT COUNT(*) FROM t").fetchall()[0][0] > 1000
        assert not pending_path(db).exists()
    finally:
        conn.close()


def test_blocked_scrub_is_recorded_and_finished_later(tmp_path: Path) -> None:
    """A reader's snapshot blocks the WAL truncation: the scrub is recorded, then finished."""
    db = tmp_path / "state.db"
    conn = fill(db)
    reader = open_db(db)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM t").fetchall()
        with conn:
            conn.execute("DELETE FROM t WHERE id % 5 = 0")
        assert not scrub(conn, db, reason="delete", wait_ms=100)
        entry = pending_scrub(db)
        assert entry is not None and entry.reason == "delete" and not entry.vacuum
        assert not finish_pending(conn, db)  # still blocked
        reader.execute("COMMIT")
        assert finish_pending(conn, db)
        assert pending_scrub(db) is None and copies(db) == 0
    finally:
        reader.close()
        conn.close()


def test_pending_record_keeps_the_first_time_and_holds_no_content(tmp_path: Path) -> None:
    """A second postponed scrub keeps the first one's time; the record is private (0600)."""
    db = tmp_path / "state.db"
    record_pending(db, "delete")
    first = pending_scrub(db)
    assert first is not None
    record_pending(db, "prune", vacuum=True)
    again = pending_scrub(db)
    assert again == PendingScrub(since=first.since, reason="prune", vacuum=True)
    assert pending_path(db).stat().st_mode & 0o077 == 0


def test_unreadable_pending_record_counts_as_pending(tmp_path: Path) -> None:
    """A damaged record is not taken as "nothing pending": it asks for a full scrub."""
    db = tmp_path / "state.db"
    pending_path(db).write_bytes(b"\xff not json")
    entry = pending_scrub(db)
    assert entry is not None and entry.vacuum


def test_nothing_pending_finishes_at_once(tmp_path: Path) -> None:
    """With no record, finish_pending has nothing to do and reports done."""
    db = tmp_path / "state.db"
    conn = open_db(db)
    try:
        assert finish_pending(conn, db)
        assert pending_scrub(db) is None
    finally:
        conn.close()
