"""How the group writer hands back outcomes: its waker thread, the overdue checkpoint after."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import apsw
import pytest

from hermes_es.commands import writer as writer_mod
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.group_engine import GroupCommitEngine
from hermes_es.errors import ConflictError
from hermes_es.store import recorder


@pytest.fixture
def gce(tmp_path: Path) -> Iterator[GroupCommitEngine]:
    """A group-commit engine on a real state.db."""
    engine = GroupCommitEngine(tmp_path / "state.db", actor="uid:0")
    yield engine
    engine.close()


def test_threads_are_woken_by_the_waker_after_the_commit(gce: GroupCommitEngine) -> None:
    """A blocked ``call`` is released by the waker thread, not the writer, and what it was
    told is already committed (another connection reads it)."""
    sid = gce.start_session("cli")
    woken_by: list[str] = []
    real = writer_mod._wake

    def recording(jobs: list[Any]) -> None:
        woken_by.append(threading.current_thread().name)
        real(jobs)

    writer_mod._wake = recording  # type: ignore[assignment]
    try:
        seq = gce.append_message(sid, "user", "hello")
    finally:
        writer_mod._wake = real  # type: ignore[assignment]
    assert woken_by and set(woken_by) == {"hermes-writer-wake"}
    conn = apsw.Connection(str(gce.db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute("SELECT seq FROM message_rows WHERE session_id = ?", (sid,)).fetchall()
    finally:
        conn.close()
    assert rows == [(seq,)]


def test_every_caller_hears_its_own_outcome_and_stop_wakes_the_rest(tmp_path: Path) -> None:
    """Many submitters on one session: each future gets its own result or its own conflict,
    in order, and stopping the writer leaves no future pending."""
    engine = GroupCommitEngine(tmp_path / "state.db")
    sid = engine.start_session("cli")
    version = engine.get(sid).version
    append = partial(SessionEngine.append_turn, engine, sid)  # no nested writer call
    futures = [
        engine.writer.submit(
            partial(append, [{"role": "user", "content": "x"}], expected_version=version),
            pure=True,
        )
        for _ in range(20)
    ]
    engine.close()
    assert all(f.done() for f in futures)
    outcomes = [f.exception() for f in futures]
    assert outcomes[0] is None  # the first one wins the expected version
    assert all(isinstance(e, ConflictError) for e in outcomes[1:])


def test_an_overdue_checkpoint_runs_after_the_group_is_handed_back(
    gce: GroupCommitEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the WAL past the inline threshold, the writer checkpoints only after it handed
    the group's outcomes back, outside any transaction."""
    monkeypatch.setattr(recorder, "INLINE_CHECKPOINT_PAGES", 1)
    order: list[str] = []
    real_deliver = writer_mod._deliver
    real_checkpoint = recorder.ApswDatastore.checkpoint_if_overdue

    def deliver(*args: Any, **kwargs: Any) -> None:
        order.append("deliver")
        real_deliver(*args, **kwargs)

    def checkpoint(self: recorder.ApswDatastore) -> None:
        overdue = getattr(self._local, "overdue", False)
        conn = self._local.conn
        assert not conn.in_transaction
        real_checkpoint(self)
        if overdue:
            order.append("checkpoint")

    monkeypatch.setattr(writer_mod, "_deliver", deliver)
    sid = gce.start_session("cli")
    gce.writer.stop()
    monkeypatch.setattr(recorder.ApswDatastore, "checkpoint_if_overdue", checkpoint)
    gce.writer.start()  # looks the checkpoint up again
    for i in range(3):
        gce.append_message(sid, "user", f"message {i}")
    assert "checkpoint" in order
    for i, step in enumerate(order):
        if step == "checkpoint":
            assert i > 0 and order[i - 1] == "deliver", order


def test_group_sizes_count_every_commit(gce: GroupCommitEngine) -> None:
    """``group_sizes`` adds up to the groups and use cases the writer committed."""
    sids = [gce.start_session("cli") for _ in range(8)]
    threads = [
        threading.Thread(target=lambda s=s: [gce.append_message(s, "user", "m") for _ in range(5)])
        for s in sids
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sizes = gce.writer.group_sizes
    assert sum(sizes.values()) == gce.writer.groups
    assert sum(k * v for k, v in sizes.items()) == gce.writer.jobs
