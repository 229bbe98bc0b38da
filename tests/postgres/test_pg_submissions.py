"""``turn_submissions`` on PostgreSQL: the same window as on SQLite, and a store of shared
layout 11 (windows inside the heads) moving them out when opened, without a replay."""

from __future__ import annotations

import msgspec
import psycopg

from hermes_es.aggregates.state import RECENT_SUBMISSIONS
from hermes_es.commands import turns
from hermes_es.commands.engine import SessionEngine
from hermes_es.store.postgres.schema import layout


def _admit(engine: SessionEngine, sid: str, sub: str) -> turns.Admission:
    return turns.admit(engine, sid, submission_id=sub, client_kind="cli", text=f"text {sub}")


def test_the_window_is_kept_apart_from_the_head(pg_url: str) -> None:
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", cwd="")
        for n in range(1, RECENT_SUBMISSIONS + 6):
            turn = _admit(eng, sid, f"sub-{n}").turn
            assert turns.start_next(eng, sid, epoch=1) == turn
            turns.finish(eng, sid, turn, outcome="completed")
    with SessionEngine.open(pg_url, actor="test") as eng:
        assert _admit(eng, sid, "sub-9").duplicate
        assert not _admit(eng, sid, "sub-2").duplicate  # left the window
    with psycopg.connect(pg_url, autocommit=True) as conn:
        (head,) = conn.execute("SELECT head FROM sessions WHERE id = %s", (sid,)).fetchone()
        first, last, count = conn.execute(
            "SELECT min(turn), max(turn), count(*) FROM turn_submissions WHERE session_id = %s",
            (sid,),
        ).fetchone()
    assert b"sub-" not in bytes(head)
    assert (first, last, count) == (7, RECENT_SUBMISSIONS + 6, RECENT_SUBMISSIONS)


def test_shared_layout_11_store_fills_the_table_from_its_heads(pg_url: str) -> None:
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", cwd="")
        eng.append_message(sid, "user", "a message whose row must not be rewritten")
        for n in range(1, 4):
            _admit(eng, sid, f"sub-{n}")
        state = eng.get(sid)
    # as layout 11 wrote it: the window inside, a list of pairs
    old_fields = msgspec.to_builtins(state)
    old_fields["recent_submissions"] = [[f"sub-{n}", n] for n in range(1, 4)]
    old_head = msgspec.msgpack.encode(old_fields)
    assert b"sub-2" in old_head
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE turn_submissions")
        conn.execute("UPDATE sessions SET head = %s WHERE id = %s", (old_head, sid))
        conn.execute(
            "UPDATE hermes_meta SET value = %s WHERE key = 'schema_version'",
            ("11." + layout().split(".")[1],),
        )
        before = conn.execute("SELECT array_agg(ctid::text) FROM messages").fetchone()
    with SessionEngine.open(pg_url, actor="test") as eng:
        assert _admit(eng, sid, "sub-2").duplicate
        assert _admit(eng, sid, "sub-4").turn == 4
    with psycopg.connect(pg_url, autocommit=True) as conn:
        after = conn.execute("SELECT array_agg(ctid::text) FROM messages").fetchone()
        rows = conn.execute(
            "SELECT submission_id, turn FROM turn_submissions WHERE session_id = %s ORDER BY 2",
            (sid,),
        ).fetchall()
        (head,) = conn.execute("SELECT head FROM sessions WHERE id = %s", (sid,)).fetchone()
        version = conn.execute(
            "SELECT value FROM hermes_meta WHERE key = 'schema_version'"
        ).fetchone()
    assert after == before  # no replay
    assert rows == [(f"sub-{n}", n) for n in range(1, 5)]
    assert b"sub-" not in bytes(head)
    assert version == (layout(),)
