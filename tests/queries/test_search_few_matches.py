"""Several-term searches with few matches: ranked by FTS5 directly, same hits as every plan."""

from __future__ import annotations

from pathlib import Path

from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.catalog import connect
from hermes_es.queries.search import search_messages


def _store(tmp_path: Path) -> Path:
    with SessionEngine.open(tmp_path) as engine:
        for k in range(6):
            sid = engine.start_session("cli" if k % 2 else "telegram", cwd=str(tmp_path))
            for j in range(8):
                text = f"filler words number {j} of session {k}"
                if j == k:
                    text += " walrus keyboard" + " walrus" * k
                engine.append_message(sid, "user" if j % 2 == 0 else "assistant", text)
    return tmp_path / "state.db"


def test_few_matches_of_two_terms_rank_like_the_full_plan(tmp_path: Path) -> None:
    """The two-term query's hits and order equal plain ORDER BY rank, snippets marked."""
    conn = connect(_store(tmp_path))
    try:
        bounded = search_messages(conn, "walrus keyboard", limit=20)
        full = search_messages(conn, "walrus keyboard", limit=20, plan="full")
        assert [(h.session_id, h.seq) for h in bounded] == [(h.session_id, h.seq) for h in full]
        assert len(bounded) == 6
        assert all("\x02walrus\x03" in h.snippet for h in bounded)
        scores = [h.score for h in bounded]
        assert scores == sorted(scores)
    finally:
        conn.close()


def test_few_matches_still_honour_source_and_role_filters(tmp_path: Path) -> None:
    """Filters apply on the direct path: only telegram sessions, only user messages."""
    conn = connect(_store(tmp_path))
    try:
        hits = search_messages(conn, "walrus keyboard", sources=["telegram"], roles=["user"])
        assert hits and all(h.source == "telegram" and h.role == "user" for h in hits)
        expected = search_messages(
            conn, "walrus keyboard", sources=["telegram"], roles=["user"], plan="full"
        )
        assert [(h.session_id, h.seq) for h in hits] == [(h.session_id, h.seq) for h in expected]
        assert (
            search_messages(conn, "walrus keyboard", limit=2)
            == search_messages(conn, "walrus keyboard", limit=20)[:2]
        )
    finally:
        conn.close()
