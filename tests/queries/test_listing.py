"""Session lists: chains as one row, source visibility, workspace needles, archive filter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.queries.listing import list_sessions, picker_sessions, store_stats


class Clock:
    """A clock that ticks one second per call, so activity order is deterministic."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SessionEngine]:
    eng = SessionEngine.open(tmp_path / "state.db", clock=Clock())
    yield eng
    eng.close()


def start(engine: SessionEngine, source: str, cwd: str = "/tmp/x/proj", text: str = "hi") -> str:
    sid = engine.start_session(source, cwd=cwd)
    engine.append_message(sid, "user", text)
    return sid


def ids(rows: list) -> list[str]:  # type: ignore[type-arg]
    return [r.id for r in rows]


def test_chain_is_one_row_with_root_preview(engine: SessionEngine) -> None:
    """A compression chain lists once: its tip, the root's preview and a segment count."""
    root = engine.start_session("cli", cwd="/tmp/x", title="payments")
    engine.append_message(root, "user", "first question")
    tip = engine.continue_session(root, [{"role": "assistant", "content": "summary"}])
    (row,) = list_sessions(engine.store.connection())
    assert (row.id, row.root_id, row.title, row.preview, row.segments) == (
        tip,
        root,
        "payments #2",
        "first question",
        2,
    )


def test_sources_visibility(engine: SessionEngine) -> None:
    """oneshot is listed but not in pickers; kanban and tool only when named."""
    cli = start(engine, "cli")
    one = start(engine, "oneshot")
    kan = start(engine, "kanban")
    tool = start(engine, "tool")
    conn = engine.store.connection()
    assert ids(list_sessions(conn)) == [one, cli]
    assert ids(picker_sessions(conn)) == [cli]
    assert ids(list_sessions(conn, sources=["kanban"])) == [kan]
    assert ids(list_sessions(conn, sources=["tool", "oneshot"])) == [tool, one]


def test_workspace_needle_substring_or_basename(engine: SessionEngine) -> None:
    """--workspace matches a path substring or the exact directory basename."""
    a = start(engine, "cli", cwd="/tmp/code/hermes-agent")
    b = start(engine, "cli", cwd="/tmp/code/other")
    conn = engine.store.connection()
    assert ids(list_sessions(conn, workspace="hermes-agent")) == [a]
    assert ids(list_sessions(conn, workspace="/tmp/code/")) == [b, a]
    assert ids(list_sessions(conn, workspace="nothing-like-it")) == []
    assert ids(list_sessions(conn, workspace="50%_")) == []


def test_archived_filter_and_limit(engine: SessionEngine) -> None:
    """Archived conversations only show with archived=True; limit caps the rows."""
    a = start(engine, "cli")
    b = start(engine, "cli")
    engine.archive(a)
    conn = engine.store.connection()
    assert ids(list_sessions(conn)) == [b]
    assert ids(list_sessions(conn, archived=True)) == [a]
    c = start(engine, "cli")
    assert ids(list_sessions(conn, limit=1)) == [c]


def test_stats_counts(engine: SessionEngine, tmp_path: Path) -> None:
    """Stats count sessions, conversations and messages per source."""
    start(engine, "cli")
    start(engine, "cli")
    start(engine, "tool")
    stats = store_stats(engine.store.connection(), tmp_path / "state.db")
    assert (stats.sessions, stats.messages, stats.db_bytes > 0) == (3, 3, True)
    assert [(s.source, s.sessions) for s in stats.by_source] == [("cli", 2), ("tool", 1)]


def test_chain_tip_stops_before_a_deleted_continuation(tmp_path: Path) -> None:
    """chain_tip never returns a session id whose continuation child was deleted."""
    from hermes_es.commands.delete import delete_session
    from hermes_es.commands.engine import SessionEngine
    from hermes_es.queries.resolve import chain_tip

    with SessionEngine.open(tmp_path) as engine:
        root = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_message(root, "user", "hello")
        child = engine.continue_session(root, [{"role": "system", "content": "summary"}])
        conn = engine.store.connection()
        assert chain_tip(conn, root) == child
        delete_session(engine.store, child)
        assert chain_tip(conn, root) == root
