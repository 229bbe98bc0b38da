"""The rebuild with a reader process: the same tables as the in-process rebuild, same errors."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from hermes_es.commands.delete import delete_session
from hermes_es.commands.engine import SessionEngine
from hermes_es.projections import rebuild as rebuild_module
from hermes_es.projections import rebuild_reader
from hermes_es.projections.catalog import connect
from hermes_es.projections.rebuild import rebuild, verify
from hermes_es.store.decoding import CorruptEventError
from tests.projections.test_rebuild import bad, populate, snapshot

pytestmark = pytest.mark.sqlite_only


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three events a batch: a small store spans many frames, recorded and raw ones."""
    monkeypatch.setattr(rebuild_module, "BATCH", 3)


def filled(home: Path) -> Path:
    """A store with every kind of event ``populate`` makes, then plain messages after it."""
    with SessionEngine.open(home) as engine:
        populate(engine)
        for i in range(4):
            sid = engine.start_session("discord", cwd="", title=f"plain {i}")
            for j in range(5):
                engine.append_message(sid, "user", f"plain words {i} {j} wombat-{i}{j}")
    return home / "state.db"


def rows_of(db: Path, table: str, order: str) -> list[tuple[object, ...]]:
    """Every row of a table in ``order`` (sessions by rowid: the order verify compares)."""
    conn = apsw.Connection(str(db))
    try:
        return [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY {order}")]
    finally:
        conn.close()


def test_reader_rebuild_writes_what_the_in_process_one_writes(
    home: Path, small_batches: None
) -> None:
    """Edits, rewinds, compaction, a continuation and a delete: same rows, indexes and order."""
    db = filled(home)
    before = snapshot(db)
    events = apsw.Connection(str(db)).execute("SELECT COUNT(*) FROM events").fetchall()[0][0]
    rebuild(db, reader=False)
    in_process = rows_of(db, "sessions", "rowid"), rows_of(db, "message_rows", "id")
    seen: list[tuple[int, int]] = []
    assert rebuild(db, lambda done, total: seen.append((done, total)), reader=True) == events
    assert seen[-1] == (events, events) and len(seen) > 5
    assert (rows_of(db, "sessions", "rowid"), rows_of(db, "message_rows", "id")) == in_process
    assert snapshot(db) == before
    assert bad(verify(db)) == {}
    with SessionEngine.open(home) as engine:
        assert [h.session_id for h in engine.search("wombat-23")]


def test_reader_rebuild_catches_up_with_appends_made_while_it_ran(
    home: Path, small_batches: None
) -> None:
    """Messages appended during the replay (read ahead or caught up at the swap) are projected."""
    db = filled(home)
    with SessionEngine.open(home) as engine:
        sid = engine.start_session("cli", cwd="")
    added: list[int] = []

    def append(done: int, total: int) -> None:
        if done >= total - 3 and len(added) < 2:  # the last frames: the reader may be done
            with SessionEngine.open(home) as other:
                other.append_message(sid, "user", f"late numbat {len(added)}")
            added.append(done)

    rebuild(db, append, reader=True)
    assert len(added) == 2
    assert bad(verify(db)) == {}
    with SessionEngine.open(home) as engine:
        assert len(engine.search("numbat")) == 2


def test_reader_rebuild_keeps_a_session_deleted_meanwhile_deleted(
    home: Path, small_batches: None
) -> None:
    """A delete landing during the replay: the session does not come back at the swap."""
    db = filled(home)
    with SessionEngine.open(home) as engine:
        gone = engine.start_session("cli", cwd="", system_prompt="PRIVATE-PROMPT-7f1")
        engine.append_message(gone, "user", "doomed quokka")
    deleted: list[object] = []

    def delete_once(done: int, total: int) -> None:
        if not deleted:
            with SessionEngine.open(home) as other:
                deleted.extend(delete_session(other.store, gone))

    rebuild(db, delete_once, reader=True)
    assert deleted
    conn = connect(db)
    try:
        assert not conn.execute("SELECT 1 FROM sessions WHERE id = ?", (gone,)).fetchall()
        assert not conn.execute("SELECT 1 FROM messages WHERE session_id = ?", (gone,)).fetchall()
    finally:
        conn.close()
    assert bad(verify(db)) == {}


def test_reader_names_an_undecodable_event_and_the_live_tables_stay(home: Path) -> None:
    """A damaged row read by the reader raises ``CorruptEventError`` naming it; no leftovers."""
    with SessionEngine.open(home) as engine:
        sid = engine.start_session("cli", cwd="")
        engine.append_message(sid, "user", "first words")
        engine.append_message(sid, "user", "second words")
    db = home / "state.db"
    conn = apsw.Connection(str(db))
    position = conn.execute(
        "SELECT id FROM events WHERE originator_id = ? AND originator_version = 2", (sid,)
    ).fetchall()[0][0]
    conn.execute("UPDATE events SET state = ? WHERE id = ?", (b"\xc1\xff\x00", position))
    conn.close()
    with pytest.raises(CorruptEventError) as caught:
        rebuild(db, reader=True)
    assert caught.value.position == position and caught.value.stream == sid
    assert f"event {position} (version 2 of stream {sid!r}" in str(caught.value)
    assert rows_of(db, "sqlite_schema WHERE name LIKE 'rebuild%'", "name") == []
    assert len(rows_of(db, "message_rows", "id")) == 2


def test_a_reader_that_dies_is_a_clear_error_and_changes_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader process that exits without a frame: ``ReaderError`` with its exit code."""
    db = filled(home)
    before = snapshot(db)
    monkeypatch.setattr(rebuild_reader.sys, "executable", "/bin/false")
    with pytest.raises(rebuild_reader.ReaderError, match=r"exit code 1\); nothing was changed"):
        rebuild(db, reader=True)
    assert snapshot(db) == before
    assert rows_of(db, "sqlite_schema WHERE name LIKE 'rebuild%'", "name") == []
