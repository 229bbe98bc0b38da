"""A live index written one message a transaction is kept to few FTS5 segments by the merge
step after each write (``projections.fts.upkeep_step``), with the same search results."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.projections import search as search_projection
from hermes_es.projections.catalog import connect
from hermes_es.queries.search import search_messages


def _write(home: Path, count: int) -> Path:
    with SessionEngine.open(home) as engine:
        sid = engine.start_session("cli", cwd=str(home))
        for k in range(count):
            engine.append_message(sid, "user", f"message {k} about w{k % 7} and topic{k % 13}")
    return home / "state.db"


def _segments(db: Path) -> int:
    conn = apsw.Connection(str(db))
    try:
        (n,) = conn.execute("SELECT count(DISTINCT segid) FROM messages_fts_idx").fetchone()
        return int(n)
    finally:
        conn.close()


def _found(db: Path, query: str) -> list[tuple[int, float, str]]:
    conn = connect(db)
    try:
        return [(h.message_id, h.score, h.snippet) for h in search_messages(conn, query, limit=50)]
    finally:
        conn.close()


def test_single_appends_keep_few_segments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """200 appends of one message each: at most ``USERMERGE - 1`` segments a level (a handful),
    where FTS5 alone keeps up to 15 on its first level; the searches find the same."""
    merged = _write(tmp_path / "merged", 200)
    monkeypatch.setattr(search_projection, "upkeep_step", lambda conn, table: None)
    plain = _write(tmp_path / "plain", 200)
    assert _segments(merged) <= 6 < _segments(plain)
    for query in ("w3", "topic5 w2", "message", "w1*"):
        assert _found(merged, query) == _found(plain, query), query
