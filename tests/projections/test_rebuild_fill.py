"""A rebuild fills the full-text index without merging as it goes, then merges it into one
segment and gives it FTS5's default options back; the collector is off during a replay."""

from __future__ import annotations

import gc

import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.projections import fts
from hermes_es.projections import rebuild as rebuild_module
from hermes_es.projections.catalog import connect
from hermes_es.projections.fts import FILL_CRISISMERGE, LIVE_OPTIONS, merge_step
from hermes_es.projections.rebuild import rebuild, verify
from hermes_es.projections.replay_gc import COLLECT_EVERY, replay_collection

pytestmark = pytest.mark.sqlite_only  # the SQLite store's FTS5 index


def many_turns(engine: SessionEngine, sessions: int = 6, turns: int = 12) -> int:
    """Sessions of several turns (four messages each, distinct words); the events written."""
    for s in range(sessions):
        sid = engine.start_session("cli", cwd="", title=f"fill {s}")
        for t in range(turns):
            engine.append_turn(
                sid,
                [
                    {"role": "user", "content": f"question {s} {t} about wombat{t} tokens"},
                    {"role": "assistant", "content": f"answer {s}-{t} with snake_case_{s}"},
                    {"role": "user", "content": f"follow up {t} on 検索 {s}"},
                    {"role": "assistant", "content": f"done {s} {t} see src/main_{t}.py"},
                ],
            )
    conn = engine.store.connection()
    return int(conn.execute("SELECT COUNT(*) FROM events").fetchall()[0][0])


def fts_options(engine: SessionEngine) -> dict[str, object]:
    conn = connect(engine.db_path)
    try:
        return {str(k): v for k, v in conn.execute("SELECT k, v FROM messages_fts_config")}
    finally:
        conn.close()


def leaves_one_segment(engine: SessionEngine) -> bool:
    """True when the index is one segment: a merge of every segment finds nothing to do."""
    conn = connect(engine.db_path)
    try:
        with conn:
            merged = merge_step(conn, "messages_fts")
        return not merged
    finally:
        conn.close()


@pytest.mark.parametrize("reader", [False, True], ids=["in-process", "reader-process"])
def test_rebuild_merges_the_index_into_one_segment(
    engine: SessionEngine, monkeypatch: pytest.MonkeyPatch, reader: bool
) -> None:
    """Many small batches (a transaction each) leave one merged segment, with the search
    results, verify and FTS5's default merge options of a store never rebuilt."""
    events = many_turns(engine)
    queries = ["wombat3", "snake_case_2", "検索", "src/main_4.py", "question"]
    before = {q: [(h.session_id, h.seq) for h in engine.search(q, limit=500)] for q in queries}
    monkeypatch.setattr(rebuild_module, "BATCH", 4)  # ~20 transactions, ~20 segments
    assert rebuild(engine.db_path, reader=reader) == events
    assert leaves_one_segment(engine)
    options = fts_options(engine)
    assert {k: options[k] for k, _ in LIVE_OPTIONS} == dict(LIVE_OPTIONS)
    assert options["secure-delete"] == 1
    after = {q: [(h.session_id, h.seq) for h in engine.search(q, limit=500)] for q in queries}
    assert after == before
    assert all(before.values())
    assert all(d.equal for d in verify(engine.db_path))


@pytest.mark.parametrize("reader", [False, True], ids=["in-process", "reader-process"])
def test_crisis_merges_during_the_fill_keep_the_index_whole(
    engine: SessionEngine, monkeypatch: pytest.MonkeyPatch, reader: bool
) -> None:
    """With a crisis merge every two segments, the fill merges at several levels as it goes
    (as a big log does at ``FILL_CRISISMERGE``): the index is still one segment, with the
    same search results and content as the live index (``verify``)."""
    events = many_turns(engine)
    queries = ["wombat7", "snake_case_4", "検索", "src/main_1.py", "answer"]
    before = {q: [(h.session_id, h.seq) for h in engine.search(q, limit=500)] for q in queries}
    monkeypatch.setattr(rebuild_module, "BATCH", 2)  # ~40 transactions, a segment each
    monkeypatch.setattr(fts, "FILL_OPTIONS", (("automerge", 0), ("crisismerge", 2)))
    assert rebuild(engine.db_path, reader=reader) == events
    assert leaves_one_segment(engine)
    after = {q: [(h.session_id, h.seq) for h in engine.search(q, limit=500)] for q in queries}
    assert after == before
    assert all(before.values())
    assert all(d.equal for d in verify(engine.db_path))


def test_two_full_levels_of_the_fill_fit_fts5s_segment_limit() -> None:
    """FTS5 refuses an index of more than 2,000 segments (FTS5_MAX_SEGMENT): a fill holds at
    most ``FILL_CRISISMERGE - 1`` a level, and a log big enough for a third level is ~40,000
    batches."""
    assert FILL_CRISISMERGE >= 2 and 3 * (FILL_CRISISMERGE - 1) < 2000


def test_appends_after_a_rebuild_are_indexed_and_merged_as_usual(
    engine: SessionEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows appended after the swap are found, and FTS5 merges them again (automerge)."""
    many_turns(engine, sessions=2, turns=4)
    monkeypatch.setattr(rebuild_module, "BATCH", 4)
    rebuild(engine.db_path)
    sid = engine.start_session("cli", cwd="")
    for i in range(6):  # one segment each: automerge (4) merges them as they come
        engine.append_message(sid, "user", f"after the rebuild quokka{i}")
    assert [h.seq for h in engine.search("quokka3")] == [3]
    assert all(d.equal for d in verify(engine.db_path))


def test_replay_collection_turns_the_collector_off_and_back_on() -> None:
    """Inside the block the automatic collector is off; afterwards it is as it was."""
    assert gc.isenabled()
    with replay_collection() as tick:
        assert not gc.isenabled()
        for _ in range(COLLECT_EVERY + 1):
            tick()
    assert gc.isenabled()
    gc.disable()
    try:
        with replay_collection():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


def test_replay_collection_still_collects_cycles() -> None:
    """A reference cycle made during a replay is collected by the block's young collections."""

    class Node:
        def __init__(self) -> None:
            self.me = self

    import weakref

    with replay_collection() as tick:
        ref = weakref.ref(Node())
        assert ref() is not None  # a cycle: reference counting alone does not free it
        for _ in range(COLLECT_EVERY):
            tick()
        assert ref() is None
