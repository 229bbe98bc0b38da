"""Pure use cases decided on the caller's thread (``Store.prepare``), adopted by the writer."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_es import events as ev
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.group_engine import GroupCommitEngine
from hermes_es.errors import ConflictError
from hermes_es.projections.rebuild import verify
from hermes_es.store.codec import pack, unpack
from hermes_es.store.db import open_db


@pytest.fixture
def gce(tmp_path: Path) -> Iterator[GroupCommitEngine]:
    """A group-commit engine on a real state.db, deciding thread callers' use cases ahead."""
    engine = GroupCommitEngine(tmp_path / "state.db", actor="uid:0")
    engine.writer.decide_ahead = True
    yield engine
    engine.close()


def _warm(gce: GroupCommitEngine, *sids: str) -> None:
    """One append each through the writer, so it keeps these sessions' heads."""
    for sid in sids:
        gce.append_message(sid, "user", "warm-up")


def _append(engine: SessionEngine, sid: str, text: str, **kw: Any) -> Callable[[], int]:
    return lambda: SessionEngine.append_message(engine, sid, "user", text, **kw)


def _events(path: Path, sid: str) -> list[tuple[int, str, bytes]]:
    conn = open_db(path, readonly=True)
    try:
        rows = conn.execute(
            "SELECT originator_version, topic, state FROM events WHERE originator_id = ?"
            " ORDER BY originator_version",
            (sid,),
        ).fetchall()
        return [(int(v), str(t), bytes(s)) for v, t, s in rows]
    finally:
        conn.close()


def _contents(path: Path, sid: str) -> list[tuple[int, str]]:
    conn = open_db(path, readonly=True)
    try:
        rows = conn.execute(
            "SELECT seq, content FROM messages WHERE session_id = ? ORDER BY seq", (sid,)
        ).fetchall()
        return [(int(s), str(c)) for s, c in rows]
    finally:
        conn.close()


def test_appends_from_many_threads_are_decided_ahead_and_stored_as_the_writer_would(
    gce: GroupCommitEngine,
) -> None:
    """Appends from 8 threads are adopted from their callers' threads; each session's seqs
    are gapless, every stored payload is byte for byte what the writer's own encoding makes
    of that event, and the projections equal a replay."""
    sids = [gce.start_session("cli") for _ in range(8)]
    _warm(gce, *sids)
    adopted = gce.writer.adopted

    def work(sid: str) -> None:
        for n in range(25):
            gce.append_message(sid, "user", f"message {n} of {sid}")

    threads = [threading.Thread(target=work, args=(sid,)) for sid in sids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert gce.writer.adopted - adopted >= 100  # most of the 200 were decided ahead
    for sid in sids:
        assert [s for s, _ in _contents(gce.db_path, sid)] == list(range(26))
        stored = _events(gce.db_path, sid)
        assert [v for v, _, _ in stored] == list(range(1, len(stored) + 1))
        for _, topic, raw in stored:
            assert pack(ev.encode(ev.decode(topic, unpack(raw)))) == raw
    assert all(d.equal for d in verify(gce.db_path))


def test_a_use_case_decided_against_a_head_that_moved_runs_again_on_the_writer(
    gce: GroupCommitEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A use case decided ahead, then overtaken by another append to its session, is not
    adopted: the writer decides it against the current head, so it gets the next seq and
    nothing is overwritten."""
    a = gce.start_session("cli")
    _warm(gce, a)
    fn = _append(gce, a, "decided early")
    early = gce.store.prepare(fn)
    assert early is not None and early.result == 1
    gce.append_message(a, "user", "overtook it")  # the head moves on
    monkeypatch.setattr(gce.store, "prepare", lambda _fn: early)
    adopted = gce.writer.adopted
    assert gce.writer.call(fn, pure=True) == 2
    assert gce.writer.adopted == adopted
    assert _contents(gce.db_path, a) == [(0, "warm-up"), (1, "overtook it"), (2, "decided early")]
    assert all(d.equal for d in verify(gce.db_path))


def test_a_stale_expected_version_is_still_a_conflict(gce: GroupCommitEngine) -> None:
    """An append with an expected version the session moved past is refused as a conflict
    (decided ahead or not), and nothing of it is stored."""
    a = gce.start_session("cli")
    _warm(gce, a)
    stale = gce.get(a).version - 1
    with pytest.raises(ConflictError):
        gce.append_message(a, "user", "refused", expected_version=stale)
    assert gce.store.prepare(_append(gce, a, "x", expected_version=stale)) is None
    assert _contents(gce.db_path, a) == [(0, "warm-up")]


def test_in_one_group_a_refusal_leaves_the_use_cases_decided_ahead_committed(
    gce: GroupCommitEngine,
) -> None:
    """One group: two appends decided on their callers' threads and a refused one between
    them; the refusal fails alone, the two others are committed and adopted."""
    a = gce.start_session("cli")
    b = gce.start_session("cli")
    _warm(gce, a, b)
    stale = gce.get(b).version - 1
    gate = threading.Event()

    def hold() -> None:  # pure, so the kept heads survive it; never decided ahead
        if gce.store.speculating():
            raise RuntimeError("not ahead")
        gate.wait()

    blocker = gce.writer.submit(hold, pure=True)
    adopted = gce.writer.adopted
    groups = gce.writer.groups
    futures = [
        gce.writer.submit(_append(gce, a, "kept a"), pure=True),
        gce.writer.submit(_append(gce, b, "refused", expected_version=stale), pure=True),
        gce.writer.submit(_append(gce, b, "kept b"), pure=True),
    ]
    gate.set()
    blocker.result(10)
    assert futures[0].result(10) == 1 and futures[2].result(10) == 1
    with pytest.raises(ConflictError):
        futures[1].result(10)
    assert gce.writer.groups - groups <= 2  # the blocker's group, then theirs
    assert gce.writer.adopted - adopted == 2
    assert _contents(gce.db_path, a) == [(0, "warm-up"), (1, "kept a")]
    assert _contents(gce.db_path, b) == [(0, "warm-up"), (1, "kept b")]
    assert all(d.equal for d in verify(gce.db_path))


def test_a_use_case_decided_ahead_has_no_effect_until_the_writer_commits_it(
    gce: GroupCommitEngine,
) -> None:
    """Deciding ahead stores nothing and tells no listener: a prepared append that is never
    handed to the writer leaves the log and the head as they were."""
    a = gce.start_session("cli")
    _warm(gce, a)
    heard: list[str] = []
    gce.on_change = heard.append
    before = _events(gce.db_path, a)
    prepared = gce.store.prepare(_append(gce, a, "never handed over"))
    assert prepared is not None and len(prepared.pending) == 1
    assert _events(gce.db_path, a) == before
    assert gce.get(a).message_count == 1
    assert heard == []


def test_with_deciding_ahead_off_the_writer_decides_every_use_case(tmp_path: Path) -> None:
    """``decide_ahead=False`` (the default): nothing is decided on the callers' threads, the
    appends are stored all the same."""
    engine = GroupCommitEngine(tmp_path / "state.db", actor="uid:0")
    try:
        assert engine.writer.decide_ahead is False
        a = engine.start_session("cli")
        _warm(engine, a)
        for n in range(5):
            engine.append_message(a, "user", f"m{n}")
        assert engine.writer.adopted == 0
        assert [s for s, _ in _contents(engine.db_path, a)] == list(range(6))
    finally:
        engine.close()


def test_a_use_case_that_submits_another_is_not_decided_ahead(gce: GroupCommitEngine) -> None:
    """A pure use case that hands the writer another job is left to the writer (deciding it
    ahead would queue that job before the use case is adopted); on the writer it runs and
    queues its job as before."""
    a = gce.start_session("cli")
    _warm(gce, a)
    queued: list[str] = []

    def fn() -> int:
        seq = SessionEngine.append_message(gce, a, "user", "with a follow-up")
        gce.writer.submit(lambda: queued.append("ran"))
        return seq

    assert gce.store.prepare(fn) is None
    assert gce.writer.call(fn, pure=True) == 1
    gce.writer.call(lambda: None)  # the follow-up ran before this
    assert queued == ["ran"]
    assert _contents(gce.db_path, a) == [(0, "warm-up"), (1, "with a follow-up")]
