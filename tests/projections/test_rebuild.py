"""rebuild() replays the log into fresh tables; verify() finds every kind of drift."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from hermes_es.commands.delete import delete_session
from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.catalog import connect
from hermes_es.projections.rebuild import TableDiff, rebuild, verify
from hermes_es.store.message_text import register_message_text

pytestmark = pytest.mark.sqlite_only  # rebuild/verify of state.db itself (tests/postgres: PG's)

SNAPSHOT_TABLES = ("sessions", "messages", "lineage", "prompts", "deletions")


def populate(engine: SessionEngine) -> list[str]:
    """A store with edits, rewinds, compaction, a continuation, a prompt and a delete."""
    a = engine.start_session("cli", cwd="", title="rebuild me", system_prompt="sys")
    engine.append_message(a, "user", "first question about chat-send")
    engine.append_turn(
        a,
        [
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "ls"}]},
            {"role": "tool", "content": "a.txt b.txt", "tool_call_id": "c1"},
            {"role": "assistant", "content": "two files"},
        ],
    )
    engine.edit_message(a, 0, "first question, edited")
    engine.append_message(a, "user", "second 検索")
    engine.rewind(a, 4)
    engine.compact(a, [4, 1], [{"role": "user", "content": "summary"}])
    child = engine.continue_session(a, [{"role": "user", "content": "carry on"}])
    engine.pin(child)
    doomed = engine.start_session("telegram", cwd="")
    engine.append_message(doomed, "user", "delete this secret")
    delete_session(engine.store, doomed, actor="test", scrub=False)
    return [a, child]


def snapshot(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every projection table (plus index names), in a stable order."""
    conn = apsw.Connection(str(db))
    register_message_text(conn)  # the messages view reads text from the log through it
    try:
        out = {
            t: sorted((tuple(r) for r in conn.execute(f"SELECT * FROM {t}")), key=repr)
            for t in SNAPSHOT_TABLES
        }
        out["indexes"] = sorted(
            tuple(r)
            for r in conn.execute(
                "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index'"
                " AND name NOT LIKE 'sqlite_autoindex%'"
            )
        )
        return out
    finally:
        conn.close()


def bad(diffs: list[TableDiff]) -> dict[str, tuple[int, int]]:
    """Tables that differ, with (live rows, rebuilt rows)."""
    return {d.table: (d.live_rows, d.rebuilt_rows) for d in diffs if not d.equal}


def corrupt(db: Path, *statements: str) -> None:
    """Change projection rows behind the engine's back."""
    conn = connect(db)
    try:
        for sql in statements:
            conn.execute(sql)
    finally:
        conn.close()


def test_verify_on_fresh_and_empty_stores(engine: SessionEngine) -> None:
    """An empty store and a populated one both verify equal, table by table."""
    assert bad(verify(engine.db_path)) == {}
    populate(engine)
    diffs = verify(engine.db_path)
    assert bad(diffs) == {}
    tables = {d.table for d in diffs}
    assert {"sessions", "message_rows", "messages_fts", "lineage", "tracking"} <= tables


def test_rebuild_reproduces_the_live_tables(engine: SessionEngine) -> None:
    """Rebuilding gives exactly the rows and indexes the inline projections wrote."""
    populate(engine)
    before = snapshot(engine.db_path)
    events = engine.store.connection().execute("SELECT COUNT(*) FROM events").fetchall()[0][0]
    seen: list[tuple[int, int]] = []
    assert (
        rebuild(engine.db_path, progress=lambda done, total: seen.append((done, total))) == events
    )
    assert seen[-1] == (events, events)
    assert snapshot(engine.db_path) == before
    assert bad(verify(engine.db_path)) == {}


def test_rebuild_progress_runs_to_the_logs_last_position(engine: SessionEngine) -> None:
    """Progress is against the log's last position, which the deleted session's events still
    count (COUNT(*) would read a whole index first); the last call is the events replayed."""
    populate(engine)
    conn = engine.store.connection()
    events, last = conn.execute("SELECT COUNT(*), MAX(id) FROM events").fetchall()[0]
    assert last > events  # the deleted session's events are gone from the log
    seen: list[tuple[int, int]] = []
    assert (
        rebuild(engine.db_path, progress=lambda done, total: seen.append((done, total))) == events
    )
    assert seen[0][1] == last
    assert all(done <= total for done, total in seen)
    assert seen[-1] == (events, events)


def test_engine_keeps_working_across_a_rebuild(engine: SessionEngine) -> None:
    """An open engine writes into the swapped-in tables; search and verify still agree."""
    a, child = populate(engine)
    engine.search("files")
    rebuild(engine.db_path)
    engine.append_message(a, "user", "written after the rebuild: wombat")
    assert [h.session_id for h in engine.search("wombat")] == [a]
    assert engine.resolve("rebuild me") == child
    assert engine.resolve("rebuild me #2") == child
    assert bad(verify(engine.db_path)) == {}


@pytest.mark.parametrize(
    ("statements", "table"),
    [
        (["UPDATE sessions SET pinned = 1 - pinned"], "sessions"),
        (["UPDATE sessions SET title = 'renamed' WHERE title = 'rebuild me'"], "sessions"),
        (["UPDATE sessions SET head = X'00'"], "sessions"),
        (["UPDATE message_rows SET state = 'active' WHERE state = 'rewound'"], "message_rows"),
        (["UPDATE message_rows SET uid = 'tampered' WHERE seq = 0"], "message_rows"),
        (["DELETE FROM lineage"], "lineage"),
        (["DELETE FROM prompts"], "prompts"),
        (["DELETE FROM deletions"], "deletions"),
        (
            [
                "INSERT INTO messages_fts(messages_fts, rowid, content)"
                " SELECT 'delete', id, content FROM messages WHERE content LIKE '%chat-send%'"
            ],
            "messages_fts",
        ),
        (
            ["UPDATE tracking SET notification_id = 1 WHERE application_name = 'projections'"],
            "tracking",
        ),
    ],
)
def test_verify_names_the_drifted_table(
    engine: SessionEngine, statements: list[str], table: str
) -> None:
    """Each kind of drift is reported against its table, and rebuild repairs it."""
    populate(engine)
    corrupt(engine.db_path, *statements)
    assert table in bad(verify(engine.db_path))
    rebuild(engine.db_path)
    assert bad(verify(engine.db_path)) == {}


def test_verify_counts_rows(engine: SessionEngine) -> None:
    """A deleted message row shows as one live row fewer than rebuilt."""
    populate(engine)
    total = engine.store.connection().execute("SELECT COUNT(*) FROM messages").fetchall()[0][0]
    corrupt(
        engine.db_path, "DELETE FROM message_rows WHERE id = (SELECT MAX(id) FROM message_rows)"
    )
    assert bad(verify(engine.db_path))["message_rows"] == (total - 1, total)


def test_rebuild_restores_search(engine: SessionEngine) -> None:
    """After the index loses entries, a rebuild makes the text findable again."""
    a, _ = populate(engine)
    corrupt(
        engine.db_path,
        "INSERT INTO messages_fts(messages_fts, rowid, content)"
        " SELECT 'delete', id, content FROM messages",
    )
    assert engine.search("files") == []
    rebuild(engine.db_path)
    assert [(h.session_id, h.seq) for h in engine.search("files")] == [(a, 3)]
    assert engine.search("chat-send") == []  # only in the edited (inactive) original


def test_deleted_sessions_stay_deleted(engine: SessionEngine) -> None:
    """A rebuild keeps deleted sessions gone (only their receipt remains)."""
    populate(engine)
    rebuild(engine.db_path)
    assert engine.search("secret") == []
    conn = engine.store.connection()
    assert conn.execute("SELECT COUNT(*) FROM deletions").fetchall() == [(1,)]
    assert conn.execute("SELECT COUNT(*) FROM sessions").fetchall() == [(2,)]


def test_verify_leaves_no_scratch_files(engine: SessionEngine, home: Path) -> None:
    """verify's scratch database and its WAL are removed."""
    populate(engine)
    before = sorted(p.name for p in home.iterdir())
    verify(engine.db_path)
    assert sorted(p.name for p in home.iterdir()) == before
    assert not [p for p in home.iterdir() if p.name.startswith(".verify-")]


def test_older_projection_layout_is_replayed_from_the_log(tmp_path: Path) -> None:
    """Opening a store whose projections have an older layout rebuilds them from the log."""
    from hermes_es.commands.engine import SessionEngine
    from hermes_es.projections.catalog import SCHEMA_VERSION, connect
    from hermes_es.projections.rebuild import verify

    with SessionEngine.open(tmp_path) as engine:
        sid = engine.start_session("cli", title="old layout", cwd=str(tmp_path))
        engine.append_message(sid, "user", "kept across the migration")
    db = tmp_path / "state.db"
    conn = connect(db)
    conn.execute("DELETE FROM sessions; DELETE FROM message_rows")
    conn.execute("CREATE TABLE session_heads (id TEXT PRIMARY KEY, version INT, state BLOB)")
    conn.execute("PRAGMA user_version = 1")  # layout 1: heads apart, older tables
    conn.close()
    conn = connect(db)
    assert conn.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION
    assert conn.execute("SELECT title FROM sessions").fetchall() == [("old layout",)]
    assert conn.execute("SELECT content FROM messages").fetchall() == [
        ("kept across the migration",)
    ]
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'session_heads'").fetchall()
    conn.close()
    assert all(d.equal for d in verify(db))


def test_an_index_only_layout_upgrade_adds_the_index_without_a_replay(tmp_path: Path) -> None:
    """Layout 5 differs from 6 by one index: the upgrade step creates it and replays nothing
    (a layout-5 store then replays for layout 8, which moved message text out of the rows)."""
    from hermes_es.commands.engine import SessionEngine
    from hermes_es.projections.catalog import SCHEMA_VERSION, UPGRADES, connect

    with SessionEngine.open(tmp_path) as engine:
        sid = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_message(sid, "user", "one")
    db = tmp_path / "state.db"
    conn = connect(db)
    conn.execute("DROP INDEX sessions_last_active")
    conn.execute("UPDATE sessions SET preview = 'marker of no replay'")
    with conn:
        UPGRADES[5](conn)
    assert conn.execute("SELECT preview FROM sessions").fetchall() == [("marker of no replay",)]
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")]
    assert "sessions_last_active" in names
    conn.execute("DROP INDEX sessions_last_active")
    conn.execute("PRAGMA user_version = 5")
    conn.close()
    conn = connect(db)
    assert conn.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")]
    assert "sessions_last_active" in names
    assert conn.execute("SELECT content FROM messages").fetchall() == [("one",)]
    conn.close()


def test_session_deleted_during_a_rebuild_stays_deleted(tmp_path: Path) -> None:
    """A delete that lands while rebuild replays does not bring the session back at the swap."""
    from hermes_es.commands.delete import delete_session
    from hermes_es.commands.engine import SessionEngine
    from hermes_es.projections.catalog import connect
    from hermes_es.projections.rebuild import rebuild, verify

    with SessionEngine.open(tmp_path) as engine:
        gone = engine.start_session("cli", system_prompt="PRIVATE-PROMPT-3c9", cwd=str(tmp_path))
        engine.append_message(gone, "user", "doomed words")
        kept = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_message(kept, "user", "kept words")
    db = tmp_path / "state.db"
    deleted = []

    def delete_mid_rebuild(done: int, total: int) -> None:
        if not deleted:  # after the first replayed batch, before the swap
            with SessionEngine.open(tmp_path) as other:
                deleted.extend(delete_session(other.store, gone))

    rebuild(db, progress=delete_mid_rebuild)
    assert deleted
    conn = connect(db)
    try:
        assert [r[0] for r in conn.execute("SELECT id FROM sessions")] == [kept]
        assert not conn.execute("SELECT 1 FROM messages WHERE session_id = ?", (gone,)).fetchall()
        assert conn.execute("SELECT COUNT(*) FROM prompts").fetchall()[0][0] == 0
    finally:
        conn.close()
    assert all(d.equal for d in verify(db))


def test_session_deleted_during_a_verify_starts_the_replay_over(tmp_path: Path) -> None:
    """A delete that lands after verify replayed the session's events: verify starts over
    (the deleted text is gone from the log) and reports every table equal."""
    from hermes_es.commands.delete import delete_session
    from hermes_es.commands.engine import SessionEngine
    from hermes_es.projections.rebuild import verify

    with SessionEngine.open(tmp_path) as engine:
        gone = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_message(gone, "user", "doomed words")
        kept = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_message(kept, "user", "kept words")
    seen: list[tuple[int, int]] = []

    def delete_mid_verify(done: int, total: int) -> None:
        seen.append((done, total))
        if len(seen) == 1:  # after the first replayed batch, which holds the doomed session
            with SessionEngine.open(tmp_path) as other:
                delete_session(other.store, gone)

    diffs = verify(tmp_path / "state.db", progress=delete_mid_verify)
    assert bad(diffs) == {}
    assert seen[0][0] == 4 and len(seen) > 2  # the replay ran again after the race
