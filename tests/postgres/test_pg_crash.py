"""Crash safety on PostgreSQL: a writer process killed with SIGKILL loses no acknowledged append.

The same writer child as the SQLite test (``tests/commands/test_crash.py``) appends messages
and turns to a server store and prints each acknowledged sequence number; it is killed in the
middle of its writes, several times. After each kill every acknowledged uid is stored once at
its sequence number, the sequence numbers have no gap, and the projections match the log.
"""

from __future__ import annotations

from typing import Any

import psycopg

from hermes_es.commands.engine import SessionEngine
from tests.commands.test_crash import run_and_kill


def _check(url: str, sid: str, acked: dict[str, int]) -> None:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT uid, seq FROM messages WHERE session_id = %s ORDER BY seq", (sid,)
        ).fetchall()
        dupes = conn.execute(
            "SELECT uid FROM messages GROUP BY session_id, uid HAVING COUNT(*) > 1"
        ).fetchall()
    stored = {str(uid): int(seq) for uid, seq in rows}
    assert {u: s for u, s in acked.items() if stored.get(u) != s} == {}
    assert [int(seq) for _, seq in rows] == list(range(len(rows)))
    assert dupes == []
    with SessionEngine.open(url) as engine:
        assert [d.table for d in engine.backend.verify() if not d.equal] == []
        state = engine.get(sid)
        assert state.next_seq == len(rows) == state.message_count


def test_sigkill_loses_no_acknowledged_append_on_postgres(pg_url: str) -> None:
    """After each SIGKILL of a writer on a server store, every acknowledged append is there,
    once, and the store takes the next append at the next sequence number."""
    with SessionEngine.open(pg_url) as engine:
        sid = engine.start_session("cli", cwd="")
    acked: dict[str, int] = {}
    target: Any = pg_url  # the child opens whatever target it is given
    for round_, acks in enumerate([120, 7, 60]):
        acked.update(run_and_kill(target, sid, round_, acks))
        _check(pg_url, sid, acked)
    with SessionEngine.open(pg_url) as engine:
        expected = engine.get(sid).next_seq
        assert expected > max(acked.values())
        assert engine.append_message(sid, "user", "after the crashes") == expected
