"""A gateway turn as two use cases (``turn_steps.begin`` and ``end``) on a real state.db."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_es.commands import turn_steps, turns
from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.rebuild import verify
from hermes_es.queries.transcript import messages_of
from hermes_es.queries.turns import events_since


@pytest.fixture
def eng(tmp_path: Path) -> Iterator[SessionEngine]:
    """An engine on a real state.db acting as the gateway."""
    engine = SessionEngine(tmp_path / "state.db", actor="gateway")
    yield engine
    engine.close()


def _admitted(engine: SessionEngine, *subs: str) -> str:
    sid = engine.start_session("cli")
    for sub in subs:
        turns.admit(engine, sid, submission_id=sub, client_kind="cli", text=f"say {sub}")
    return sid


def _begin(engine: SessionEngine, sid: str, turn: int, text: str = "hi") -> turn_steps.Begun:
    return turn_steps.begin(
        engine,
        sid,
        turn,
        epoch=1,
        messages=[{"role": "user", "content": text}],
        actor="uid:1000",
        display_version=engine.get(sid).display_version,
    )


def _types(engine: SessionEngine, sid: str) -> list[str]:
    return [e.type.removeprefix("hermes.") for e in events_since(engine.store.connection(), sid, 0)]


def test_begin_and_end_store_a_turn_as_two_atomic_steps(eng: SessionEngine) -> None:
    """``begin`` stores the start and the user message together, ``end`` the reply and the
    finish together; the messages carry the submitter as actor, the turn events the gateway,
    and the projections rebuild to what was written live."""
    sid = _admitted(eng, "a")
    begun = _begin(eng, sid, 1)
    assert (begun.turn, begun.seqs, begun.error, begun.transcript_moved) == (1, [0], "", False)
    assert eng.get(sid).turn_running == 1
    ended = turn_steps.end(
        eng,
        sid,
        1,
        messages=[{"role": "assistant", "content": "hello"}],
        actor="uid:1000",
        user_seqs=begun.seqs,
        display_version=begun.version,
    )
    assert (ended.outcome, ended.seqs, ended.transcript_moved) == ("completed", [0, 1], False)
    state = eng.get(sid)
    assert (state.turn_running, state.turn_queue, state.version) == (0, [], ended.version)
    events = events_since(eng.store.connection(), sid, 0)
    assert [e.type.removeprefix("hermes.") for e in events][-4:] == [
        "turn.started",
        "message.appended",
        "message.appended",
        "turn.finished",
    ]
    assert [e.actor for e in events[-4:]] == ["gateway", "uid:1000", "uid:1000", "gateway"]
    assert events[-1].event["seqs"] == [0, 1]
    assert [m.content for m in messages_of(eng.store.connection(), sid)] == ["hi", "hello"]
    diffs = verify(eng.db_path)
    assert diffs and all(d.equal for d in diffs), diffs


def test_end_says_which_turn_may_run_next(eng: SessionEngine) -> None:
    """``end`` reports the session's next runnable turn as of its commit (the queue worker
    stops on 0 without reading the head again): the follower while one is queued, 0 after
    the last, for a completed and for a failed turn alike."""
    sid = _admitted(eng, "a", "b")

    def run(turn: int, error: str = "") -> turn_steps.Ended:
        begun = _begin(eng, sid, turn)
        return turn_steps.end(
            eng,
            sid,
            turn,
            messages=[{"role": "assistant", "content": "ok"}],
            actor="uid:1000",
            user_seqs=begun.seqs,
            display_version=begun.version,
            error=error,
        )

    first = run(1)
    assert (first.outcome, first.runnable) == ("completed", 2)
    second = run(2, error="the model failed")
    assert (second.outcome, second.runnable) == ("failed", 0)
    turns.admit(eng, sid, submission_id="c", client_kind="cli", text="say c")
    assert run(3).runnable == 0


def test_begin_of_a_turn_not_next_changes_nothing(eng: SessionEngine) -> None:
    """A begin naming a turn that is not the next runnable one (cancelled, or another one
    running) stores nothing and says so."""
    sid = _admitted(eng, "a", "b")
    before = eng.get(sid).version
    assert _begin(eng, sid, 2).turn == 0
    turns.cancel(eng, sid, 1)
    assert _begin(eng, sid, 1).turn == 0
    assert eng.get(sid).version == before + 1  # only the cancel
    assert _begin(eng, sid, 2).turn == 2
    assert _begin(eng, sid, 2).turn == 0  # it is running now


def test_a_crash_after_begin_leaves_the_turn_unknown_and_its_follower_queued(
    eng: SessionEngine,
) -> None:
    """What a crash leaves: a begun turn (user message stored) is recorded unknown by the
    next epoch and never replayed; the follower, only admitted, stays queued and waits."""
    sid = _admitted(eng, "a", "b")
    _begin(eng, sid, 1)
    assert turns.recover(eng, epoch=2) == [(sid, 1)]
    state = eng.get(sid)
    assert (state.turns_unknown, state.turn_queue, state.turn_running) == ([1], [2], 0)
    assert turns.start_next(eng, sid, epoch=2) == 0
    turns.resolve(eng, sid, 1)
    assert turns.start_next(eng, sid, epoch=2) == 2


def test_a_refused_user_message_finishes_the_turn_failed_in_the_same_step(
    eng: SessionEngine, tmp_path: Path
) -> None:
    """A user message the session refuses (over the size limit) is not stored; the turn is
    started and finished ``failed`` with the refusal, so the queue moves on."""
    small = SessionEngine(tmp_path / "state.db", actor="gateway", max_message_bytes=64)
    try:
        sid = _admitted(small, "a", "b")
        begun = _begin(small, sid, 1, text="x" * 100)
        assert begun.turn == 1 and begun.seqs == [] and "64 bytes" in begun.error
        state = small.get(sid)
        assert (state.turn_running, state.turn_queue, state.message_count) == (0, [2], 0)
        assert _types(small, sid)[-2:] == ["turn.started", "turn.finished"]
    finally:
        small.close()


def test_end_with_an_error_or_a_refused_reply_stores_no_message(
    eng: SessionEngine, tmp_path: Path
) -> None:
    """``end`` with the runner's error finishes ``failed`` and stores nothing of the reply;
    a reply the session refuses does the same, naming the refusal."""
    sid = _admitted(eng, "a", "b")
    begun = _begin(eng, sid, 1)
    ended = turn_steps.end(
        eng,
        sid,
        1,
        messages=[{"role": "assistant", "content": "lost"}],
        actor="uid:1000",
        user_seqs=begun.seqs,
        display_version=begun.version,
        error="endpoint down",
    )
    assert (ended.outcome, ended.error, ended.seqs) == ("failed", "endpoint down", [])
    assert eng.get(sid).message_count == 1
    small = SessionEngine(tmp_path / "state.db", actor="gateway", max_message_bytes=64)
    try:
        begun = _begin(small, sid, 2)
        ended = turn_steps.end(
            small,
            sid,
            2,
            messages=[{"role": "assistant", "content": "y" * 100}],
            actor="uid:1000",
            user_seqs=begun.seqs,
            display_version=begun.version,
        )
        assert ended.outcome == "failed" and "64 bytes" in ended.error
        state = small.get(sid)
        assert (state.turn_running, state.message_count) == (0, 2)
    finally:
        small.close()


def test_a_transcript_changed_by_another_writer_is_reported(eng: SessionEngine) -> None:
    """A transcript changed since the caller's ``display_version`` (another writer appended)
    is reported by both steps, so the caller reloads its window instead of trusting it."""
    sid = _admitted(eng, "a")
    seen = eng.get(sid).display_version
    eng.append_message(sid, "user", "from elsewhere")
    begun = turn_steps.begin(
        eng,
        sid,
        1,
        epoch=1,
        messages=[{"role": "user", "content": "hi"}],
        actor="uid:1000",
        display_version=seen,
    )
    assert begun.transcript_moved and begun.seqs == [1]
    ended = turn_steps.end(
        eng, sid, 1, messages=[], actor="uid:1000", user_seqs=[1], display_version=seen
    )
    assert ended.transcript_moved and ended.outcome == "completed"
