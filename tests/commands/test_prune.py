"""Prune rules: ended only, pinned never, compression chains as a unit with tip-based age."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.prune import (
    DAY,
    UnitFilter,
    execute_prune,
    parse_age,
    parse_time,
    plan_prune,
)
from hermes_es.errors import ValidationError
from hermes_es.queries.units import load_units

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


def chat(engine: SessionEngine, text: str = "hello", source: str = "cli", **kw: object) -> str:
    sid = engine.start_session(source, cwd="/tmp/work/proj", **kw)  # type: ignore[arg-type]
    engine.append_message(sid, "user", text)
    return sid


def plan(engine: SessionEngine, f: UnitFilter, now: float, held: set[str] | None = None):  # type: ignore[no-untyped-def]
    return plan_prune(load_units(engine.store.connection()), f, now, held or set())


def test_only_ended_sessions_are_pruned(engine: SessionEngine, clock: Clock) -> None:
    """An old session that never ended stays; an old ended one goes."""
    open_ = chat(engine)
    done = chat(engine)
    engine.end_session(done)
    p = plan(engine, UnitFilter(older_than=DAY), T0 + 10 * DAY)
    assert [u.tip.id for u in p.selected] == [done]
    assert [(k.tip_id, k.reason) for k in p.kept] == [(open_, "not ended")]


def test_pinned_is_never_pruned(engine: SessionEngine) -> None:
    """A pinned ended session matches the filter but is kept as pinned."""
    sid = chat(engine)
    engine.end_session(sid)
    engine.pin(sid)
    p = plan(engine, UnitFilter(older_than=DAY), T0 + 10 * DAY)
    assert p.selected == [] and p.kept[0].reason == "pinned"


def test_chain_age_counts_from_the_tip(engine: SessionEngine, clock: Clock) -> None:
    """An old root segment stays while its recent continuation does; age is the tip's."""
    root = chat(engine, "old start")
    clock.now = T0 + 20 * DAY
    tip = engine.continue_session(root, [{"role": "user", "content": "summary"}])
    engine.end_session(tip)
    p = plan(engine, UnitFilter(older_than=10 * DAY), T0 + 25 * DAY)
    assert p.selected == [] and p.kept == []
    p = plan(engine, UnitFilter(older_than=10 * DAY), T0 + 31 * DAY)
    assert [u.ids for u in p.selected] == [[root, tip]]
    assert p.session_ids == [tip, root]


def test_chain_with_pinned_segment_is_kept_whole(engine: SessionEngine) -> None:
    """Pinning an older segment keeps the whole conversation."""
    root = chat(engine)
    engine.pin(root)
    tip = engine.continue_session(root, [{"role": "user", "content": "summary"}])
    engine.end_session(tip)
    p = plan(engine, UnitFilter(older_than=DAY), T0 + 10 * DAY)
    assert p.selected == [] and p.kept[0].reason == "pinned"


def test_filters_source_title_messages_and_window(engine: SessionEngine) -> None:
    """Source, title substring, message bounds and before/after all narrow the selection."""
    a = chat(engine, source="cli", title="Payments refactor")
    b = chat(engine, source="telegram")
    engine.append_message(b, "assistant", "reply")
    for sid in (a, b):
        engine.end_session(sid)
    now = T0 + 10 * DAY

    def ids(f: UnitFilter) -> list[str]:
        return [u.tip.id for u in plan(engine, f, now).selected]

    assert ids(UnitFilter(older_than=DAY, sources=("telegram",))) == [b]
    assert ids(UnitFilter(older_than=DAY, title="payments")) == [a]
    assert ids(UnitFilter(older_than=DAY, min_messages=2)) == [b]
    assert ids(UnitFilter(older_than=DAY, max_messages=1)) == [a]
    assert sorted(ids(UnitFilter(before=T0 + 1))) == sorted([a, b])
    assert ids(UnitFilter(after=T0 + 1)) == []
    assert sorted(ids(UnitFilter(older_than=DAY, cwd="proj"))) == sorted([a, b])
    assert ids(UnitFilter(older_than=DAY, cwd="elsewhere")) == []


def test_held_session_is_kept(engine: SessionEngine) -> None:
    """A session another hermes process holds open is never pruned."""
    sid = chat(engine)
    engine.end_session(sid)
    p = plan(engine, UnitFilter(older_than=DAY), T0 + 10 * DAY, held={sid})
    assert p.selected == [] and p.kept[0].reason == "open in a running hermes process"


def test_delegate_goes_with_its_parent_and_blocks_while_open(engine: SessionEngine) -> None:
    """A delegate is no unit of its own; an open delegate keeps its parent."""
    parent = chat(engine)
    child = chat(engine, parent_id=parent, parent_kind="delegate")
    engine.end_session(parent)
    p = plan(engine, UnitFilter(older_than=DAY), T0 + 10 * DAY)
    assert p.selected == [] and p.kept[0].reason == "a delegate has not ended"
    engine.end_session(child)
    p = plan(engine, UnitFilter(older_than=DAY), T0 + 10 * DAY)
    assert [u.tip.id for u in p.selected] == [parent] and p.sessions == 2


def test_execute_deletes_chain_and_leaves_receipts(engine: SessionEngine) -> None:
    """Executing the plan removes every segment and leaves one receipt per session."""
    root = chat(engine)
    tip = engine.continue_session(root, [{"role": "user", "content": "summary"}])
    engine.end_session(tip)
    keep = chat(engine)
    p = plan(engine, UnitFilter(older_than=DAY), T0 + 10 * DAY)
    done = execute_prune(engine.store, p, actor="test")
    assert sorted(d.session_id for d in done) == sorted([root, tip])
    conn = engine.store.connection()
    left = [r[0] for r in conn.execute("SELECT id FROM sessions")]
    assert left == [keep]
    assert conn.execute("SELECT COUNT(*) FROM deletions").fetchall()[0][0] == 2


def test_reopened_after_planning_is_skipped(engine: SessionEngine) -> None:
    """A unit reopened between plan and execute is re-checked in the transaction and kept."""
    sid = chat(engine)
    engine.end_session(sid)
    p = plan(engine, UnitFilter(older_than=DAY), T0 + 10 * DAY)
    engine.reopen(sid)
    assert execute_prune(engine.store, p) == []
    assert p.kept[-1].reason == "changed during prune"
    assert engine.get(sid).version > 0


def test_parse_age_and_time() -> None:
    """Ages take s/m/h/d/w/y (bare numbers are days); times take ISO dates or ages."""
    assert parse_age("30d") == 30 * DAY
    assert parse_age("12h") == 12 * 3600
    assert parse_age("2w") == 14 * DAY
    assert parse_age("7") == 7 * DAY
    assert parse_time("1d", T0) == T0 - DAY
    assert parse_time("2023-01-02", T0) < T0
    with pytest.raises(ValidationError, match="invalid age"):
        parse_age("soon")
    with pytest.raises(ValidationError, match="invalid time"):
        parse_time("yesterday-ish", T0)
