"""The group-commit writer's deferred path: pure use cases decided in memory, written together."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.group_engine import GroupCommitEngine
from hermes_es.errors import ConflictError, SessionNotFoundError, ValidationError
from hermes_es.projections.rebuild import verify
from hermes_es.store.db import open_db


@pytest.fixture
def gce(tmp_path: Path) -> Iterator[GroupCommitEngine]:
    """A group-commit engine on a real state.db."""
    engine = GroupCommitEngine(tmp_path / "state.db", actor="uid:0")
    yield engine
    engine.close()


def _rows(path: Path, sid: str) -> list[tuple[int, str]]:
    conn = open_db(path, readonly=True)
    try:
        rows = conn.execute(
            "SELECT seq, content FROM messages WHERE session_id = ? ORDER BY seq", (sid,)
        )
        return [(int(s), str(c)) for s, c in rows.fetchall()]
    finally:
        conn.close()


def _one_group(gce: GroupCommitEngine, *jobs: tuple[Callable[[], Any], bool]) -> list[object]:
    """Run ``(fn, pure)`` use cases in one group (the writer is held until all are queued)."""
    gate = threading.Event()
    blocker = gce.writer.submit(gate.wait)
    futures = [gce.writer.submit(fn, pure=pure) for fn, pure in jobs]
    groups = gce.writer.groups
    gate.set()
    blocker.result(10)
    out: list[object] = []
    for fut in futures:
        try:
            out.append(fut.result(10))
        except Exception as exc:
            out.append(exc)
    assert gce.writer.groups - groups <= 1  # they did share one transaction
    return out


def _append(engine: SessionEngine, sid: str, text: str, **kw: Any) -> Callable[[], int]:
    return lambda: SessionEngine.append_message(engine, sid, "user", text, **kw)


def test_pure_use_cases_refuse_alone_and_the_rest_is_stored_as_a_rebuild_would(
    gce: GroupCommitEngine,
) -> None:
    """In one group of deferred appends, a stale version and an empty message fail alone, a
    missing session names itself, two appends to one session get consecutive seqs, and the
    projections equal a replay of the log."""
    a = gce.start_session("cli")
    b = gce.start_session("cli")
    stale = gce.get(a).version
    deferred = gce.writer.deferred
    out = _one_group(
        gce,
        (_append(gce, a, "alpha one"), True),
        (_append(gce, a, "refused", expected_version=stale), True),
        (_append(gce, b, "   "), True),
        (_append(gce, "nope-0000", "to nobody"), True),
        (_append(gce, a, "alpha two", expected_version=stale + 1), True),
        (_append(gce, b, "beta one"), True),
    )
    assert out[0] == 0 and out[4] == 1 and out[5] == 0
    assert isinstance(out[1], ConflictError)
    assert isinstance(out[2], ValidationError)
    assert isinstance(out[3], SessionNotFoundError)
    assert gce.writer.deferred - deferred == 5  # the missing session ran in a savepoint
    assert _rows(gce.db_path, a) == [(0, "alpha one"), (1, "alpha two")]
    assert _rows(gce.db_path, b) == [(0, "beta one")]
    head = gce.get(a)
    assert (head.version, head.message_count) == (stale + 2, 2)
    assert all(d.equal for d in verify(gce.db_path))
    assert [h.session_id for h in gce.search("alpha")] == [a, a]


def test_a_use_case_that_needs_the_connection_sees_what_the_group_decided_before_it(
    gce: GroupCommitEngine,
) -> None:
    """A client uid (looked up in the rows) runs in its own savepoint after the group's earlier
    deferred rows were written: retrying it in the same group stores it once."""
    a = gce.start_session("cli")
    deferred = gce.writer.deferred
    out = _one_group(
        gce,
        (_append(gce, a, "first"), True),
        (_append(gce, a, "with uid", uid="client-uid-1"), True),
        (_append(gce, a, "with uid", uid="client-uid-1"), True),
        (_append(gce, a, "last"), True),
    )
    assert out == [0, 1, 1, 2]
    assert gce.writer.deferred - deferred == 2
    assert _rows(gce.db_path, a) == [(0, "first"), (1, "with uid"), (2, "last")]
    assert all(d.equal for d in verify(gce.db_path))


def test_a_savepoint_use_case_between_deferred_ones_is_seen_by_the_next(
    gce: GroupCommitEngine,
) -> None:
    """A non-pure use case that ends the session between two deferred appends: the second
    append reloads the head, reopens the session and continues its versions."""
    a = gce.start_session("cli")
    out = _one_group(
        gce,
        (_append(gce, a, "before the end"), True),
        (lambda: SessionEngine.end_session(gce, a, "user_exit"), False),
        (_append(gce, a, "after the end"), True),
    )
    assert out[0] == 0 and out[2] == 1
    head = gce.get(a)
    assert not head.ended and head.message_count == 2
    assert all(d.equal for d in verify(gce.db_path))


def test_writing_the_deferred_rows_fails_then_each_use_case_runs_in_its_savepoint(
    gce: GroupCommitEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the group's batched insert fail, it leaves nothing behind and its use cases run
    again one by one: the good ones are stored once, the refusal still fails alone."""
    a = gce.start_session("cli")
    b = gce.start_session("cli")
    recorder = gce.store.recorder
    real = recorder._insert_rows
    calls: list[int] = []

    def failing_once(conn: apsw.Connection, rows: Any) -> list[int]:
        calls.append(len(rows))
        if len(calls) == 1:
            real(conn, rows)  # rows really written, then the statement "fails"
            raise apsw.ConstraintError("UNIQUE constraint failed: injected")
        return real(conn, rows)

    monkeypatch.setattr(recorder, "_insert_rows", failing_once)
    stale = gce.get(b).version - 1
    out = _one_group(
        gce,
        (_append(gce, a, "kept a"), True),
        (_append(gce, b, "refused", expected_version=stale), True),
        (_append(gce, b, "kept b"), True),
    )
    assert calls[0] == 2
    assert out[0] == 0 and out[2] == 0 and isinstance(out[1], ConflictError)
    assert _rows(gce.db_path, a) == [(0, "kept a")]
    assert _rows(gce.db_path, b) == [(0, "kept b")]
    assert all(d.equal for d in verify(gce.db_path))


def test_a_failed_write_after_a_savepoint_use_case_undoes_only_the_deferred_rows(
    gce: GroupCommitEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group's first write has no savepoint (its failure reruns the whole group); a
    later one has its own: a use case already run in a savepoint is written once, the
    deferred ones after it run again one by one."""
    a = gce.start_session("cli")
    b = gce.start_session("cli")
    recorder = gce.store.recorder
    real = recorder._insert_rows
    calls: list[int] = []

    def failing_once(conn: apsw.Connection, rows: Any) -> list[int]:
        calls.append(len(rows))
        if len(calls) == 1:
            real(conn, rows)
            raise apsw.ConstraintError("UNIQUE constraint failed: injected")
        return real(conn, rows)

    monkeypatch.setattr(recorder, "_insert_rows", failing_once)
    out = _one_group(
        gce,
        (_append(gce, a, "in its savepoint"), False),
        (_append(gce, a, "deferred a"), True),
        (_append(gce, b, "deferred b"), True),
    )
    assert calls == [2]
    assert out == [0, 1, 0]
    assert _rows(gce.db_path, a) == [(0, "in its savepoint"), (1, "deferred a")]
    assert _rows(gce.db_path, b) == [(0, "deferred b")]
    assert all(d.equal for d in verify(gce.db_path))


def test_a_failed_first_write_reruns_the_group_with_nothing_of_it_left(
    gce: GroupCommitEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first write of a group (no savepoint) fails after its rows went in: the whole
    transaction rolls back, every use case (the one that needs the connection too) runs
    again in its own savepoint, each stored once."""
    a = gce.start_session("cli")
    recorder = gce.store.recorder
    real = recorder._insert_rows
    calls: list[int] = []

    def failing_once(conn: apsw.Connection, rows: Any) -> list[int]:
        calls.append(len(rows))
        if len(calls) == 1:
            real(conn, rows)
            raise apsw.ConstraintError("UNIQUE constraint failed: injected")
        return real(conn, rows)

    monkeypatch.setattr(recorder, "_insert_rows", failing_once)
    out = _one_group(
        gce,
        (_append(gce, a, "first"), True),
        (_append(gce, a, "second"), True),
        (_append(gce, a, "in its savepoint"), False),
    )
    assert calls == [2]
    assert out == [0, 1, 2]
    assert _rows(gce.db_path, a) == [(0, "first"), (1, "second"), (2, "in its savepoint")]
    assert gce.get(a).message_count == 3
    assert all(d.equal for d in verify(gce.db_path))


def test_listeners_hear_the_deferred_changes_as_the_log_holds_them(
    gce: GroupCommitEngine,
) -> None:
    """A group of deferred turn use cases: the changes handed to the commit listener build the
    same stream events as the log gives back."""
    import asyncio

    from hermes_es.commands import turns
    from hermes_es.queries import turns as q

    heard: list[Any] = []
    sid = gce.start_session("cli")

    async def main() -> None:
        writer = gce.writer
        writer.listen(heard.extend)
        await writer.submit_async(
            lambda: turns.admit(gce, sid, submission_id="s1", client_kind="cli", text="hi"),
            pure=True,
        )
        turn = await writer.submit_async(lambda: turns.start_next(gce, sid, epoch=1), pure=True)
        seqs = await asyncio.gather(
            writer.submit_async(_append(gce, sid, "hi"), pure=True),
            writer.submit_async(_append(gce, sid, "again"), pure=True),
        )
        await writer.submit_async(
            lambda: turns.finish(gce, sid, turn, outcome="completed", seqs=list(seqs)), pure=True
        )

    asyncio.run(main())
    built = [q.stream_event(c.stream, c.version, c.event) for c in heard]
    assert built == q.events_since(gce.store.connection(), sid, 1)
    assert gce.get(sid).turn_state == ""
    assert all(d.equal for d in verify(gce.db_path))


def test_concurrent_deferred_appends_are_durable_when_acknowledged(
    gce: GroupCommitEngine,
) -> None:
    """Threads appending through the engine (deferred): every acknowledged message is already
    visible to another connection, and the store verifies."""
    sids = [gce.start_session("cli") for _ in range(8)]
    seen: dict[str, list[int]] = {s: [] for s in sids}

    def work(sid: str) -> None:
        for i in range(15):
            seq = gce.append_message(sid, "user", f"message {i} of {sid}")
            assert seq == i
            seen[sid].append(len(_rows(gce.db_path, sid)))

    threads = [threading.Thread(target=work, args=(s,)) for s in sids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(counts == sorted(counts) and counts[-1] == 15 for counts in seen.values())
    assert all(c >= i + 1 for counts in seen.values() for i, c in enumerate(counts))
    assert all(d.equal for d in verify(gce.db_path))


def test_heads_kept_between_groups_are_reloaded_after_other_writes(
    gce: GroupCommitEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """The writer keeps the heads it loaded from group to group; a commit by another
    connection, or a use case run alone, makes it load them again: no version is reused, no
    write is lost, and the group's batched insert never had to fall back."""
    caplog.set_level(logging.WARNING, logger="hermes.writer")
    a = gce.start_session("cli")
    assert gce.append_message(a, "user", "first") == 0
    other = SessionEngine(gce.db_path)
    try:
        assert other.append_message(a, "user", "from another connection") == 1
    finally:
        other.close()
    assert gce.append_message(a, "user", "second") == 2
    alone = gce.writer.call(
        lambda: SessionEngine.append_message(gce, a, "user", "written alone"), alone=True
    )
    assert alone == 3
    assert gce.append_message(a, "user", "third") == 4
    assert [s for s, _ in _rows(gce.db_path, a)] == [0, 1, 2, 3, 4]
    assert gce.get(a).version == 6
    assert all(d.equal for d in verify(gce.db_path))
    assert not [r for r in caplog.records if r.name == "hermes.writer"]
