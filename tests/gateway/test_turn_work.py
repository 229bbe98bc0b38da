"""The ``turn_work`` projection: the sessions a gateway's start-up must look at, kept as small
as the pending work and read through indexes instead of decoding every session's head."""

from __future__ import annotations

from pathlib import Path

from hermes_es.commands import turns
from hermes_es.commands.delete import delete_many
from hermes_es.commands.engine import SessionEngine
from hermes_es.gateway.reaper import REAPABLE_SOURCES
from hermes_es.projections.rebuild import verify
from hermes_es.queries.turns import (
    LATER_SQL,
    SWEEP_SQL,
    sessions_with_turns,
    sweep_candidates,
    sweep_later,
    turn_states,
)


def _rows(engine: SessionEngine) -> list[tuple[str, str, int]]:
    conn = engine.store.connection()
    rows = conn.execute("SELECT session_id, state, running FROM turn_work ORDER BY 1")
    return [tuple(r) for r in rows.fetchall()]  # type: ignore[misc]


def _admit(engine: SessionEngine, sid: str, sub: str) -> None:
    turns.admit(engine, sid, submission_id=sub, client_kind="cli", text=f"text {sub}")


def test_rows_follow_the_turn_lifecycle_and_rebuild_identically(tmp_path: Path) -> None:
    """Queued, running and unknown sessions have a row; an idle or deleted one has none; the
    table rebuilds from the log to the same rows."""
    with SessionEngine(tmp_path / "state.db", actor="uid:1") as eng:
        embedded = eng.start_session("cli")
        eng.append_message(embedded, "user", "never through a gateway")
        sid, other = eng.start_session("cli"), eng.start_session("cli")
        _admit(eng, sid, "a")
        _admit(eng, sid, "b")
        assert _rows(eng) == [(sid, "queued", 0)]
        assert turns.start_next(eng, sid, epoch=1) == 1
        assert _rows(eng) == [(sid, "running", 1)]
        assert sessions_with_turns(eng.store.connection(), running=True) == [sid]
        _admit(eng, other, "c")
        turns.start_next(eng, other, epoch=1)
        turns.finish(eng, other, 1, outcome="completed")
        assert [r[0] for r in _rows(eng)] == [sid]  # idle again: its row went
        assert turns.recover(eng, epoch=2) == [(sid, 1)]
        assert _rows(eng) == [(sid, "unknown", 0)]
        assert turn_states(eng.store.connection(), [sid, other, embedded]) == {sid: "unknown"}
        diffs = verify(eng.db_path)
        assert diffs and all(d.equal for d in diffs), diffs
        turns.resolve(eng, sid)
        assert _rows(eng) == [(sid, "queued", 0)]  # its follower is next
        delete_many(eng.store, [sid], reason="delete", actor="uid:1")
        assert _rows(eng) == []


def test_startup_reads_go_through_indexes(tmp_path: Path) -> None:
    """The sweep reads only open sessions (the sessions_open index) and skips those with turn
    work; recovery reads turn_work, never the sessions table."""
    now = [1_000_000.0]
    with SessionEngine(tmp_path / "state.db", clock=lambda: now[0]) as eng:
        ended = eng.start_session("cli")
        eng.end_session(ended, "user_exit")
        idle, busy, platform = (eng.start_session(s) for s in ("cli", "cli", "telegram"))
        _admit(eng, busy, "x")
        now[0] += 7 * 3600
        fresh = eng.start_session("cli")
        conn = eng.store.connection()
        cutoff = now[0] - 6 * 3600
        assert sweep_candidates(conn, {"cli", "tui"}, cutoff) == [idle]
        assert fresh not in sweep_candidates(conn, {"cli"}, now[0] - 1)
        sources = sorted(REAPABLE_SOURCES)  # the sweep's own statement, as the reaper sends it
        sql = SWEEP_SQL.format(marks=", ".join("?" * len(sources)))
        rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}", (cutoff, *sources)).fetchall()
        plan = " ".join(str(r[-1]) for r in rows)
        assert "sessions_open" in plan, plan
        assert sweep_candidates(conn, {"telegram"}, cutoff) == [platform]
        # what it leaves for later: the open ones active since the cutoff, with no turn work
        assert sweep_later(conn, {"cli", "tui"}, cutoff) == [(fresh, now[0])]
        sql = LATER_SQL.format(marks=", ".join("?" * len(sources)))
        rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}", (cutoff, *sources)).fetchall()
        plan = " ".join(str(r[-1]) for r in rows)
        assert "sessions_open" in plan, plan


def test_layout_8_store_gains_turn_work_from_its_heads(tmp_path: Path) -> None:
    """A store of layout 8 (no turn_work) upgrades in place: rows built from the heads, no
    replay, and verify finds no drift."""
    from hermes_es.projections.catalog import SCHEMA_VERSION, connect

    db = tmp_path / "state.db"
    with SessionEngine(db) as eng:
        sid = eng.start_session("cli")
        _admit(eng, sid, "a")
    conn = connect(db)
    conn.execute("DROP TABLE turn_work")
    conn.execute("DROP INDEX sessions_open")
    conn.execute("PRAGMA user_version = 8")
    conn.close()
    conn = connect(db)
    assert conn.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION
    assert conn.execute("SELECT session_id, state FROM turn_work").fetchall() == [(sid, "queued")]
    conn.close()
    diffs = verify(db)
    assert diffs and all(d.equal for d in diffs), diffs
