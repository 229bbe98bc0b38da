"""Message rows found by (session, seq) without a (session, seq) index (layout 10)."""

from __future__ import annotations

from pathlib import Path

from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.catalog import SCHEMA_VERSION, connect
from hermes_es.projections.messages import MessagesProjector, by_seq_args
from hermes_es.projections.rebuild import verify
from hermes_es.queries import lookup
from hermes_es.queries.transcript import messages_of


def _indexes(conn: object) -> set[str]:
    rows = conn.execute(  # type: ignore[attr-defined]
        "SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'message_rows'"
    ).fetchall()
    return {r[0] for r in rows}


def _edited_and_compacted(db: Path) -> str:
    """A session with rows in their place, an edit's replacement and a compaction summary."""
    with SessionEngine(db) as eng:
        sid = eng.start_session("cli")
        for i in range(6):
            eng.append_message(sid, "user" if i % 2 == 0 else "assistant", f"message {i}")
        eng.edit_message(sid, 2, "message 2, edited")  # replacement seq 6 at ord 2.0
        eng.compact(sid, [0, 1], [{"role": "assistant", "content": "summary of 0 and 1"}])
        eng.edit_message(sid, 6, "message 2, edited twice")  # a moved row edited again
        eng.rewind(sid, 4)  # rewinds 5 and the moved 7 and 8
    return sid


def test_point_lookups_seek_through_indexes_only(tmp_path: Path) -> None:
    """Every (session, seq) statement seeks messages_ord or messages_moved: no scan of a
    session's rows, and no messages_seq index exists."""
    db = tmp_path / "state.db"
    sid = _edited_and_compacted(db)
    conn = connect(db)
    assert "messages_seq" not in _indexes(conn)
    assert {"messages_ord", "messages_moved"} <= _indexes(conn)
    m = MessagesProjector()
    role_sql = (
        "SELECT role FROM messages WHERE session_id = ? AND ord = ? AND seq = ?"
        " UNION ALL SELECT role FROM messages WHERE session_id = ? AND seq = ? AND ord <> seq"
    )
    for sql, args in [
        (m._set_state, ("x", *by_seq_args(sid, 3))),
        (m._ord_of, by_seq_args(sid, 3)),
        (role_sql, by_seq_args(sid, 3)),
    ]:
        plan = [str(r[-1]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args)]
        seeks = [p for p in plan if "message_rows" in p or p.startswith("SEARCH r ")]
        assert any("messages_ord (session_id=? AND ord=? AND seq=?)" in p for p in seeks), plan
        assert any("messages_moved (session_id=? AND seq=?)" in p for p in seeks), plan
        assert not any(p.startswith("SCAN") for p in plan), plan
    conn.close()


def test_moved_rows_are_found_and_projections_equal_a_rebuild(tmp_path: Path) -> None:
    """Edits of moved rows, a compaction and a rewind leave the rows a rebuild makes; the
    role of a moved row and of a row in its place is found."""
    db = tmp_path / "state.db"
    sid = _edited_and_compacted(db)
    conn = connect(db)
    states = {
        r[0]: (r[1], r[2])
        for r in conn.execute(
            "SELECT seq, ord, state FROM message_rows WHERE session_id = ?", (sid,)
        )
    }
    assert states[2][1] == "edited" and states[6] == (2.0, "edited")
    assert states[0][1] == states[1][1] == "compacted"
    assert states[4][1] == "active" and states[5][1] == "rewound"
    assert states[7] == (1.5, "rewound") and states[8] == (2.0, "rewound")  # moved rows
    assert lookup.role_of(conn, sid, 6) == "user"  # moved (ord 2.0)
    assert lookup.role_of(conn, sid, 7) == "assistant"  # moved (ord 1.5)
    assert lookup.role_of(conn, sid, 3) == "assistant"  # in its place
    assert lookup.role_of(conn, sid, 99) is None
    shown = [m.content for m in messages_of(conn, sid)]
    assert shown == ["message 0", "message 1", "message 3", "message 4"]
    conn.close()
    diffs = verify(db)
    assert diffs and all(d.equal for d in diffs), diffs


def test_layout_9_store_swaps_the_index_without_a_replay(tmp_path: Path) -> None:
    """A layout-9 store (with messages_seq) opens as the current layout: messages_seq dropped,
    messages_moved built from the rows, nothing replayed, every event kept."""
    db = tmp_path / "state.db"
    sid = _edited_and_compacted(db)
    conn = connect(db)
    events = conn.execute("SELECT id, originator_id, originator_version FROM events").fetchall()
    conn.execute("DROP INDEX messages_moved")
    conn.execute("CREATE UNIQUE INDEX messages_seq ON message_rows (session_id, seq)")
    conn.execute("UPDATE sessions SET preview = 'marker of no replay'")
    conn.execute("PRAGMA user_version = 9")
    conn.close()
    conn = connect(db)
    assert conn.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION
    assert "messages_seq" not in _indexes(conn)
    assert "messages_moved" in _indexes(conn)
    assert conn.execute("SELECT preview FROM sessions").fetchall() == [("marker of no replay",)]
    after = conn.execute("SELECT id, originator_id, originator_version FROM events").fetchall()
    assert after == events
    moved = conn.execute(
        "SELECT seq FROM message_rows INDEXED BY messages_moved WHERE session_id = ?"
        " AND ord <> seq ORDER BY seq",
        (sid,),
    ).fetchall()
    assert moved == [(6,), (7,), (8,)]  # the two replacements and the summary
    conn.close()
