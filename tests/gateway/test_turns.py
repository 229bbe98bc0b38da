"""Turn lifecycle: aggregate decisions, admission use cases and recovery on a real state.db."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_es.aggregates import turns as agg
from hermes_es.aggregates.state import SessionState
from hermes_es.commands import turns
from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import InvariantError, SessionNotFoundError, ValidationError
from hermes_es.projections.rebuild import verify
from hermes_es.queries.history import session_history
from hermes_es.queries.turns import admitted_text, events_since, sessions_with_turns


@pytest.fixture
def eng(tmp_path: Path) -> Iterator[SessionEngine]:
    """An engine on a real state.db acting as a native operator."""
    engine = SessionEngine(tmp_path / "state.db", actor="uid:1000")
    yield engine
    engine.close()


def _admit(engine: SessionEngine, sid: str, sub: str, text: str = "hello") -> turns.Admission:
    return turns.admit(engine, sid, submission_id=sub, client_kind="cli", text=text)


def test_admission_is_idempotent_by_submission_id(eng: SessionEngine) -> None:
    """The same submission id twice is admitted once and answers with the same turn."""
    sid = eng.start_session("cli")
    first = _admit(eng, sid, "sub-1")
    again = _admit(eng, sid, "sub-1", text="different text")
    second = _admit(eng, sid, "sub-2")
    assert (first.turn, first.duplicate) == (1, False)
    assert (again.turn, again.duplicate, again.version) == (1, True, first.version)
    assert second.turn == 2 and second.queued == [1, 2]
    assert admitted_text(eng.store.connection(), sid, 1) == "hello"


def test_turns_run_fifo_and_finish(eng: SessionEngine) -> None:
    """Turns start first in first out, one at a time, and finishing frees the next."""
    sid = eng.start_session("cli")
    _admit(eng, sid, "a")
    _admit(eng, sid, "b")
    assert turns.start_next(eng, sid, epoch=1) == 1
    assert turns.start_next(eng, sid, epoch=1) == 0  # turn 1 still runs
    state = turns.finish(eng, sid, 1, outcome="completed", seqs=[0, 1])
    assert state.turn_running == 0 and state.turn_queue == [2]
    assert turns.start_next(eng, sid, epoch=1) == 2
    turns.finish(eng, sid, 2, outcome="failed", error="endpoint down")
    assert eng.get(sid).turn_state == ""


def test_crash_marks_started_turn_unknown_and_followers_wait(eng: SessionEngine) -> None:
    """A turn started by an older epoch becomes unknown; its follower waits until resolved."""
    sid = eng.start_session("cli")
    other = eng.start_session("cli")
    _admit(eng, sid, "a")
    _admit(eng, sid, "b")
    _admit(eng, other, "c")
    e1 = turns.begin_epoch(eng, "default", instance_id="one", pid=1)
    assert turns.start_next(eng, sid, epoch=e1) == 1
    e2 = turns.begin_epoch(eng, "default", instance_id="two", pid=2)
    assert e2 == e1 + 1
    assert turns.recover(eng, epoch=e2) == [(sid, 1)]
    assert turns.recover(eng, epoch=e2) == []  # recovery is idempotent
    state = eng.get(sid)
    assert state.turn_state == "unknown" and state.turn_queue == [2]
    assert turns.start_next(eng, sid, epoch=e2) == 0  # the follower waits
    assert turns.start_next(eng, other, epoch=e2) == 1  # other sessions go on
    assert sorted(sessions_with_turns(eng.store.connection())) == sorted([sid, other])
    assert turns.resolve(eng, sid, resolution="discard") == 1
    assert turns.start_next(eng, sid, epoch=e2) == 2


def test_refusals_change_nothing(eng: SessionEngine) -> None:
    """Bad submissions, cancelling a running turn and resolving nothing are refused."""
    sid = eng.start_session("cli")
    version = eng.get(sid).version
    with pytest.raises(ValidationError, match="empty message"):
        _admit(eng, sid, "x", text="   ")
    with pytest.raises(ValidationError, match="submission_id"):
        _admit(eng, sid, "")
    with pytest.raises(SessionNotFoundError):
        _admit(eng, "20240101_000000_abcdef", "x")
    with pytest.raises(InvariantError, match="no unknown turn"):
        turns.resolve(eng, sid)
    assert eng.get(sid).version == version
    _admit(eng, sid, "a")
    _admit(eng, sid, "b")
    turns.start_next(eng, sid, epoch=1)
    with pytest.raises(InvariantError, match="running: only queued"):
        turns.cancel(eng, sid, 1)
    assert turns.cancel(eng, sid, 2).turn_queue == []


def test_history_shows_who_submitted_what(eng: SessionEngine) -> None:
    """``sessions history`` lines name the actor, client kind and outcome of each turn."""
    sid = eng.start_session("cli")
    _admit(eng, sid, "a", text="fix the build")
    turns.start_next(eng, sid, epoch=3)
    turns.finish(eng, sid, 1, outcome="completed")
    entries = session_history(eng.store.connection(), sid)
    lines = [(e.actor, e.summary) for e in entries[1:]]
    assert lines == [
        ("uid:1000", "turn 1 admitted from cli: fix the build"),
        ("uid:1000", "turn 1 started (epoch 3)"),
        ("uid:1000", "turn 1 completed"),
    ]
    replay = events_since(eng.store.connection(), sid, 1)
    assert [e.sequence for e in replay] == [2, 3, 4]
    assert replay[0].event["submission_id"] == "a"


def test_rebuilt_projections_equal_live_ones_with_turn_events(eng: SessionEngine) -> None:
    """Head rows folded from turn events rebuild identically (the fold is the source)."""
    sid = eng.start_session("cli")
    _admit(eng, sid, "a")
    turns.start_next(eng, sid, epoch=1)
    turns.recover(eng, epoch=2)
    diffs = verify(eng.db_path)
    assert diffs and all(d.equal for d in diffs), diffs


def test_next_runnable_rules() -> None:
    """Nothing runs while a turn runs or is unknown; otherwise the queue's head runs."""
    state = SessionState(session_id="s", version=1, turn_queue=[3, 4])
    assert agg.next_runnable(state) == 3
    state.turn_running = 2
    assert agg.next_runnable(state) == 0
    state.turn_running = 0
    state.turns_unknown = [2]
    assert agg.next_runnable(state) == 0


def test_layout_6_heads_are_reencoded_and_verify_clean(tmp_path: Path) -> None:
    """A store whose heads predate the turn fields upgrades in place; verify finds no drift."""
    import msgspec

    from hermes_es.aggregates.state import SessionState, decode_state
    from hermes_es.projections.catalog import SCHEMA_VERSION, connect

    with SessionEngine(tmp_path / "state.db") as engine:
        sid = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_message(sid, "user", "one")
    db = tmp_path / "state.db"
    conn = connect(db)
    head = decode_state(conn.execute("SELECT head FROM sessions").fetchall()[0][0])
    old_fields = {f: getattr(head, f) for f in SessionState.__struct_fields__ if "turn" not in f}
    old_fields.pop("recent_submissions")
    shrunk = msgspec.msgpack.encode(old_fields)  # a head as layout 6 wrote it
    conn.execute("UPDATE sessions SET head = ?", (shrunk,))
    conn.execute("PRAGMA user_version = 6")
    conn.close()
    conn = connect(db)
    assert conn.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION
    conn.close()
    diffs = verify(db)
    assert diffs and all(d.equal for d in diffs), diffs


def test_a_full_queue_refuses_new_submissions_and_stores_nothing(eng: SessionEngine) -> None:
    """At ``MAX_QUEUED_TURNS`` waiting turns a new submission is refused (the submitter is
    told why and what to do), a resubmission of a queued one still answers as a duplicate,
    and once a turn left the queue a new one is admitted."""
    sid = eng.start_session("cli")
    for n in range(agg.MAX_QUEUED_TURNS):
        _admit(eng, sid, f"sub-{n}")
    version = eng.get(sid).version
    with pytest.raises(InvariantError, match=rf"at most {agg.MAX_QUEUED_TURNS}\)") as caught:
        _admit(eng, sid, "one-too-many")
    assert caught.value.subject == sid
    assert eng.get(sid).version == version
    assert _admit(eng, sid, "sub-3").duplicate
    turns.cancel(eng, sid, 5)
    admitted = _admit(eng, sid, "one-too-many")
    assert (admitted.turn, admitted.duplicate) == (agg.MAX_QUEUED_TURNS + 1, False)
    assert len(admitted.queued) == agg.MAX_QUEUED_TURNS
