"""The ``turn_submissions`` projection: a session's submission window stored one row an
admission, out of its head, and read back whenever a head is loaded for a decision."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import msgspec

from hermes_es.aggregates.state import RECENT_SUBMISSIONS, decode_state
from hermes_es.commands import turns
from hermes_es.commands.delete import delete_session
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.group_engine import GroupCommitEngine
from hermes_es.projections.catalog import SCHEMA_VERSION, connect
from hermes_es.projections.rebuild import verify
from hermes_es.projections.submissions import with_submissions
from hermes_es.queries.turns import admitted_as, head

TURNS = RECENT_SUBMISSIONS + 44
"""Admissions a session gets in these tests: its first 44 leave the window."""


def _admit(engine: SessionEngine, sid: str, sub: str) -> turns.Admission:
    return turns.admit(engine, sid, submission_id=sub, client_kind="cli", text=f"text {sub}")


def _turn(engine: SessionEngine, sid: str, sub: str) -> int:
    """One whole turn: admitted, started, finished (the queue stays short)."""
    turn = _admit(engine, sid, sub).turn
    assert turns.start_next(engine, sid, epoch=1) == turn
    turns.finish(engine, sid, turn, outcome="completed")
    return turn


def _stored(db: Path, sid: str) -> tuple[bytes, list[tuple[str, int]]]:
    conn = connect(db)
    try:
        blob = conn.execute("SELECT head FROM sessions WHERE id = ?", (sid,)).fetchall()[0][0]
        rows = conn.execute(
            "SELECT submission_id, turn FROM turn_submissions WHERE session_id = ? ORDER BY turn",
            (sid,),
        ).fetchall()
        return bytes(blob), [(str(s), int(t)) for s, t in rows]
    finally:
        conn.close()


def _window(first: int, last: int) -> list[tuple[str, int]]:
    return [(f"sub-{n}", n) for n in range(first, last + 1)]


def test_the_window_lives_in_its_table_not_in_the_head(tmp_path: Path) -> None:
    """After 300 admissions the stored head holds no submission id (it was 10 KB of the
    session's row, rewritten with every write), the table holds exactly the last 256, and
    the loaded head has them back."""
    db = tmp_path / "state.db"
    with SessionEngine(db) as engine:
        sid = engine.start_session("cli")
        for n in range(1, TURNS + 1):
            assert _turn(engine, sid, f"sub-{n}") == n
    blob, rows = _stored(db, sid)
    assert decode_state(blob).recent_submissions == {}
    assert b"sub-" not in blob
    assert rows == _window(TURNS - RECENT_SUBMISSIONS + 1, TURNS)
    conn = connect(db)
    try:
        loaded = head(conn, sid)
        assert loaded is not None and loaded.recent_submissions == {}  # a plain read
        with_submissions(conn, loaded)
        inside = admitted_as(conn, sid, f"sub-{TURNS - 3}")
        gone = admitted_as(conn, sid, "sub-1")
    finally:
        conn.close()
    assert loaded.recent_submissions == dict(rows)
    assert list(loaded.recent_submissions) == [sub for sub, _ in rows]  # oldest first
    assert (inside, gone) == (TURNS - 3, 0)


def test_a_reopened_store_still_admits_each_id_once(tmp_path: Path) -> None:
    """A fresh engine (nothing in memory) answers a submission of the window with its turn,
    and admits one older than the window as a new turn, as documented."""
    db = tmp_path / "state.db"
    with SessionEngine(db) as engine:
        sid = engine.start_session("cli")
        for n in range(1, TURNS + 1):
            _turn(engine, sid, f"sub-{n}")
    with SessionEngine(db) as engine:
        again = _admit(engine, sid, f"sub-{TURNS - 200}")
        assert (again.turn, again.duplicate) == (TURNS - 200, True)
        oldest = TURNS - RECENT_SUBMISSIONS + 1
        assert _admit(engine, sid, f"sub-{oldest}").duplicate
        fresh = _admit(engine, sid, "sub-1")  # left the window 44 admissions ago
        assert (fresh.turn, fresh.duplicate) == (TURNS + 1, False)
    _, rows = _stored(db, sid)
    assert rows[-1] == ("sub-1", TURNS + 1) and len(rows) == RECENT_SUBMISSIONS


def test_the_group_writer_reads_the_window_back(tmp_path: Path) -> None:
    """The writer's deferred decisions load heads themselves: after a restart (no kept
    heads) a resubmission is still a duplicate, and nothing new is stored for it."""
    db = tmp_path / "state.db"
    engine = GroupCommitEngine(db, actor="uid:0")
    try:
        sid = engine.start_session("cli")
        for n in range(1, 41):
            engine.writer.call(partial(_admit, engine, sid, f"sub-{n}"), pure=True)
    finally:
        engine.close()
    engine = GroupCommitEngine(db, actor="uid:0")
    try:
        before = engine.get(sid).version
        again = engine.writer.call(partial(_admit, engine, sid, "sub-7"), pure=True)
        assert (again.turn, again.duplicate) == (7, True)
        assert engine.get(sid).version == before
    finally:
        engine.close()


def test_rebuild_and_verify_agree_with_the_rows_written_live(tmp_path: Path) -> None:
    """The rows a replay writes are the rows the live path kept (the window, not every
    admission), so verify finds no drift."""
    db = tmp_path / "state.db"
    with SessionEngine(db) as engine:
        sid = engine.start_session("cli")
        for n in range(1, TURNS + 1):
            _turn(engine, sid, f"sub-{n}")
    diffs = verify(db)
    assert diffs and all(d.equal for d in diffs), diffs
    assert any(d.table == "turn_submissions" for d in diffs), diffs


def test_a_deleted_session_leaves_no_submission_row(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with SessionEngine(db) as engine:
        gone, kept = engine.start_session("cli"), engine.start_session("cli")
        for n in range(1, 4):
            _admit(engine, gone, f"gone-{n}")
            _admit(engine, kept, f"kept-{n}")
        delete_session(engine.store, gone)
    assert _stored(db, kept)[1] == [(f"kept-{n}", n) for n in range(1, 4)]
    conn = connect(db)
    try:
        left = conn.execute(
            "SELECT count(*) FROM turn_submissions WHERE session_id = ?", (gone,)
        ).fetchall()
    finally:
        conn.close()
    assert left == [(0,)]


def test_layout_11_store_moves_its_windows_out_of_the_heads(tmp_path: Path) -> None:
    """A store of layout 11 (windows inside the heads, no table) upgrades in place: the table
    is filled from the heads, the heads shrink, ids stay admitted once, verify is clean."""
    db = tmp_path / "state.db"
    with SessionEngine(db) as engine:
        sid = engine.start_session("cli")
        for n in range(1, 6):
            _admit(engine, sid, f"sub-{n}")
    conn = connect(db)
    state = head(conn, sid)
    assert state is not None
    # as layout 11 wrote it: the window inside, a list of pairs
    old_fields = msgspec.to_builtins(state)
    old_fields["recent_submissions"] = [[f"sub-{n}", n] for n in range(1, 6)]
    old_head = msgspec.msgpack.encode(old_fields)
    assert b"sub-3" in old_head
    conn.execute("DROP TABLE turn_submissions")
    conn.execute("UPDATE sessions SET head = ? WHERE id = ?", (old_head, sid))
    conn.execute("PRAGMA user_version = 11")
    conn.close()
    conn = connect(db)
    assert conn.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION
    conn.close()
    blob, rows = _stored(db, sid)
    assert rows == _window(1, 5) and b"sub-" not in blob
    with SessionEngine(db) as engine:
        assert _admit(engine, sid, "sub-3").duplicate
        assert _admit(engine, sid, "sub-6").turn == 6
    diffs = verify(db)
    assert diffs and all(d.equal for d in diffs), diffs
