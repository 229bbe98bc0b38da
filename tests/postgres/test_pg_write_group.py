"""The engine's write transaction on PostgreSQL: positions known under the lock, writes sent as
one statement (``PgConnection.hold_write``), and everything the held path must keep."""

from __future__ import annotations

import select
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import StoredEvent

from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import ConflictError
from hermes_es.projections.base import message_row_id
from hermes_es.store.postgres.connection import MAX_GROUP_PARAMS, write_shape
from hermes_es.store.postgres.schema import WRITE_LOCK_FUNCTION


def _rows(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return list(conn.execute(sql, params).fetchall())


def test_positions_ids_and_sequence_agree(pg_url: str) -> None:
    """Each append's event gets the next notification id, its message row the id derived from
    it, tracking the last one, and the log's sequence continues after them: eventsourcing's
    own recorder insert (which draws from the sequence) lands right after."""
    with SessionEngine.open(pg_url, actor="t") as eng:
        sid = eng.start_session("cli", cwd="")
        for i in range(5):
            eng.append_message(sid, "user", f"message {i}")
        eng.append_turn(
            sid, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
        )
        events = _rows(pg_url, "SELECT notification_id, originator_version FROM events ORDER BY 1")
        assert [n for n, _ in events] == list(range(1, len(events) + 1))
        messages = _rows(pg_url, "SELECT id, version FROM messages ORDER BY seq")
        by_version = dict((v, n) for n, v in events)
        turn = by_version[messages[-1][1]]
        assert [m for m, _ in messages] == [
            *(message_row_id(by_version[v], 0) for _, v in messages[:-2]),
            message_row_id(turn, 0),
            message_row_id(turn, 1),
        ]
        assert _rows(pg_url, "SELECT id FROM messages_fts ORDER BY id") == [
            (m,) for m, _ in sorted(messages)
        ]
        assert _rows(pg_url, "SELECT notification_id FROM tracking") == [(events[-1][0],)]
        recorder = eng.store.pg_recorder
        ids = recorder.insert_events(
            [StoredEvent(originator_id="other", originator_version=1, topic="t", state=b"x")]
        )
        assert ids == [events[-1][0] + 1]
        eng.append_message(sid, "user", "after the recorder's insert")
        assert _rows(pg_url, "SELECT max(notification_id) FROM events") == [(events[-1][0] + 2,)]


def test_refused_append_leaves_no_gap_in_rows_and_ids_stay_unique(pg_url: str) -> None:
    """A stale expected version is a ConflictError that writes nothing; the next append gets
    a fresh id (the refused one never reached the server) and verify stays clean."""
    with SessionEngine.open(pg_url, actor="t") as eng:
        sid = eng.start_session("cli", cwd="")
        eng.append_message(sid, "user", "one")
        version = eng.get(sid).version
        with pytest.raises(ConflictError):
            eng.append_message(sid, "user", "stale", expected_version=version - 1)
        eng.append_message(sid, "user", "two", expected_version=version)
        assert [d.table for d in eng.backend.verify() if not d.equal] == []
    texts = _rows(pg_url, "SELECT content FROM messages ORDER BY seq")
    assert texts == [("one",), ("two",)]
    ids = _rows(pg_url, "SELECT notification_id FROM events ORDER BY 1")
    assert len(set(ids)) == len(ids) == 3


def test_rolled_back_savepoint_drops_its_held_writes(pg_url: str) -> None:
    """A nested write block that fails rolls back alone: its held rows never reach the
    server, the outer block's rows commit, and the next append continues cleanly."""
    with SessionEngine.open(pg_url, actor="t") as eng:
        sid = eng.start_session("cli", cwd="")
        store: Any = eng.store
        with store.transaction() as outer:
            outer.load(sid)
            eng.append_message(sid, "user", "outer")  # nested: a savepoint in the same txn
            with pytest.raises(RuntimeError), store.transaction() as inner:
                inner.load(sid)
                eng.append_message(sid, "user", "rolled back")
                store.connection().execute(  # held, never sent: the block fails first
                    "UPDATE sessions SET title = ? WHERE id = ?", ("held", sid)
                )
                raise RuntimeError("undo this block")
        eng.append_message(sid, "user", "next")
        assert [d.table for d in eng.backend.verify() if not d.equal] == []
        assert eng.get(sid).message_count == 2
        assert eng.get(sid).title == ""
    assert _rows(pg_url, "SELECT content FROM messages ORDER BY seq") == [("outer",), ("next",)]


def test_append_notifies_listeners(pg_url: str) -> None:
    """A committed append reaches a LISTEN on the log's channel (the team follower's wake-up)."""
    with psycopg.connect(pg_url, autocommit=True) as listener:
        listener.execute("LISTEN events")
        with SessionEngine.open(pg_url, actor="t") as eng:
            sid = eng.start_session("cli", cwd="")
            list(listener.notifies(timeout=0.5))  # the start's notification
            eng.append_message(sid, "user", "wake up")
            select.select([listener.fileno()], [], [], 5)
            got = [n.channel for n in listener.notifies(timeout=1, stop_after=1)]
    assert got == ["events"]


def test_many_rows_beyond_one_statement(pg_url: str) -> None:
    """A turn whose message rows carry more parameters than one held statement may still
    stores every row (it goes out on its own), searchable, verify clean."""
    rows_needed = MAX_GROUP_PARAMS // 20 + 50
    with SessionEngine.open(pg_url, actor="t") as eng:
        sid = eng.start_session("cli", cwd="")
        seqs = eng.append_turn(
            sid, [{"role": "user", "content": f"bulk word{i}"} for i in range(rows_needed)]
        )
        assert len(seqs) == rows_needed
        assert [h.session_id for h in eng.search("word7")] == [sid]
        assert [d.table for d in eng.backend.verify() if not d.equal] == []
    assert _rows(pg_url, "SELECT COUNT(*) FROM messages") == [(rows_needed,)]


def test_store_from_before_the_lock_function_is_brought_up_to_date(pg_url: str) -> None:
    """A store created before the write-lock function existed gets it when next opened, and
    loses the duplicate recency index it had (``sessions_last_active`` is the same index)."""
    with SessionEngine.open(pg_url, actor="t") as eng:
        sid = eng.start_session("cli", cwd="")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP FUNCTION {WRITE_LOCK_FUNCTION}(integer)")
        conn.execute("CREATE INDEX sessions_active ON sessions (last_active DESC, id DESC)")
    with SessionEngine.open(pg_url, actor="t") as eng:
        eng.append_message(sid, "user", "written")
        assert eng.get(sid).message_count == 1
    indexes = {r[0] for r in _rows(pg_url, "SELECT indexname FROM pg_indexes")}
    assert "sessions_active" not in indexes
    assert "sessions_last_active" in indexes


@pytest.mark.parametrize(
    ("sql", "shared"),
    [
        ("INSERT INTO messages (id, content) VALUES (%s, %s)", True),
        ("INSERT INTO t (a) VALUES (%s::tsvector)", True),
        ("INSERT INTO t (a) VALUES (%s) ON CONFLICT (a) DO UPDATE SET a = excluded.a", True),
        ("UPDATE sessions SET a = %s WHERE id = %s", True),
        ("DELETE FROM messages WHERE session_id = %s", True),
        ("DELETE FROM t WHERE id IN (SELECT id FROM u WHERE s = %s)", False),
        ("DELETE FROM events WHERE originator_id = %s RETURNING 1", False),
        ("INSERT INTO t (a) SELECT a FROM u", False),
        ("SELECT head FROM sessions WHERE id = %s", False),
    ],
)
def test_only_plain_writes_are_held(sql: str, shared: bool) -> None:
    """Writes that read another table or return rows run in order, never in a shared
    statement; plain inserts, updates and deletes may share one."""
    assert (write_shape(sql) is not None) is shared
