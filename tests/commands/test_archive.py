"""Archive rules: units through the live tip, active chats never hidden, sweep versus manual."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_es.commands.archive import (
    archive_matching,
    archive_sessions,
    pin_sessions,
    sweep_idle,
    unarchive_sessions,
)
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.prune import DAY, UnitFilter
from hermes_es.queries.listing import list_sessions

T0 = 1_700_000_000.0


class Clock:
    """A settable clock for the engine."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def engine(tmp_path: Path, clock: Clock) -> Iterator[SessionEngine]:
    eng = SessionEngine.open(tmp_path, clock=clock)
    yield eng
    eng.close()


def chat(engine: SessionEngine, text: str = "hello") -> str:
    sid = engine.start_session("cli", cwd="/tmp/work/proj")
    engine.append_message(sid, "user", text)
    return sid


def visible(engine: SessionEngine) -> list[str]:
    return [r.id for r in list_sessions(engine.store.connection())]


def archived(engine: SessionEngine) -> list[str]:
    return [r.id for r in list_sessions(engine.store.connection(), archived=True)]


def test_archive_of_old_segment_goes_through_the_tip(engine: SessionEngine) -> None:
    """Naming an old compression segment archives the conversation via its live tip."""
    root = chat(engine)
    tip = engine.continue_session(root, [{"role": "user", "content": "summary"}])
    assert archive_sessions(engine, [root]) == [tip]
    assert engine.get(tip).archived == "user" and engine.get(root).archived == ""
    assert visible(engine) == [] and archived(engine) == [tip]


def test_bulk_archive_never_hides_an_active_chat(engine: SessionEngine, clock: Clock) -> None:
    """An old, long conversation whose tip is still live and recent is not archived in bulk."""
    root = chat(engine, "started long ago")
    clock.now = T0 + 100 * DAY
    tip = engine.continue_session(root, [{"role": "user", "content": "summary"}])
    engine.append_message(tip, "user", "still chatting")
    idle = chat(engine)
    engine.end_session(idle)
    clock.now = T0 + 100.5 * DAY
    assert archive_matching(engine, UnitFilter(), clock.now) == [idle]
    assert visible(engine) == [tip]


def test_bulk_archive_age_is_the_tips(engine: SessionEngine, clock: Clock) -> None:
    """--older-than looks at the tip: an old root never matches on its own age."""
    root = chat(engine)
    clock.now = T0 + 30 * DAY
    tip = engine.continue_session(root, [{"role": "user", "content": "summary"}])
    engine.end_session(tip)
    assert archive_matching(engine, UnitFilter(older_than=10 * DAY), T0 + 35 * DAY) == []
    assert archive_matching(engine, UnitFilter(older_than=10 * DAY), T0 + 45 * DAY) == [tip]


def test_sweep_archives_idle_with_reason_sweep(engine: SessionEngine, clock: Clock) -> None:
    """The idle sweep archives conversations idle longer than N days, with reason sweep."""
    old = chat(engine)
    clock.now = T0 + 20 * DAY
    fresh = chat(engine)
    assert sweep_idle(engine, 14, now=T0 + 21 * DAY) == [old]
    assert engine.get(old).archived == "sweep"
    assert visible(engine) == [fresh]
    assert sweep_idle(engine, 0, now=T0 + 100 * DAY) == []


def test_sweep_leaves_pinned_and_held_alone(engine: SessionEngine) -> None:
    """Pinned conversations are never swept."""
    sid = chat(engine)
    pin_sessions(engine, [sid], True)
    assert sweep_idle(engine, 1, now=T0 + 10 * DAY) == []


def test_swept_chat_comes_back_on_resume(engine: SessionEngine, clock: Clock) -> None:
    """Resuming a sweep-archived chat unarchives it."""
    sid = chat(engine)
    sweep_idle(engine, 1, now=T0 + 10 * DAY)
    clock.now = T0 + 11 * DAY
    engine.resume(sid)
    assert engine.get(sid).archived == "" and visible(engine) == [sid]


def test_swept_chat_comes_back_when_compressed(engine: SessionEngine, clock: Clock) -> None:
    """A compression continuation of a swept chat is a visible, unarchived tip."""
    sid = chat(engine)
    sweep_idle(engine, 1, now=T0 + 10 * DAY)
    clock.now = T0 + 11 * DAY
    child = engine.continue_session(sid, [{"role": "user", "content": "summary"}])
    assert engine.get(child).archived == ""
    assert visible(engine) == [child]


def test_user_archive_survives_resume_and_compression(engine: SessionEngine) -> None:
    """A chat the user archived stays archived through resume and continuation."""
    sid = chat(engine)
    archive_sessions(engine, [sid])
    engine.resume(sid)
    assert engine.get(sid).archived == "user"
    child = engine.continue_session(sid, [{"role": "user", "content": "summary"}])
    assert visible(engine) == [] and archived(engine) == [child]
    assert sorted(unarchive_sessions(engine, [child])) == [sid]
    assert visible(engine) == [child]


def test_sweep_never_relabels_a_user_archive(engine: SessionEngine) -> None:
    """The sweep skips conversations the user archived already."""
    sid = chat(engine)
    archive_sessions(engine, [sid])
    assert sweep_idle(engine, 1, now=T0 + 10 * DAY) == []
    assert engine.get(sid).archived == "user"


def test_sweep_on_the_way_out_runs_at_most_daily(
    engine: SessionEngine, clock: Clock, tmp_path: Path
) -> None:
    """maybe_sweep runs the idle sweep once, then not again until a day has passed."""
    from hermes_es.commands.archive import maybe_sweep

    marker = tmp_path / ".auto-archive-sweep"
    old = chat(engine)
    assert maybe_sweep(engine, marker, 0, now=T0 + 30 * DAY) is None  # off
    assert maybe_sweep(engine, marker, 14, now=T0 + 30 * DAY) == [old]
    clock.now = T0 + 30 * DAY
    newer = chat(engine)
    assert maybe_sweep(engine, marker, 0.5, now=T0 + 30.9 * DAY) is None  # not due yet
    assert maybe_sweep(engine, marker, 0.5, now=T0 + 31.5 * DAY) == [newer]
