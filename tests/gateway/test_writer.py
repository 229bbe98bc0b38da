"""The group-commit writer: many sessions' use cases per transaction, one savepoint each."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from hermes_es.commands.group_engine import GroupCommitEngine
from hermes_es.errors import ConflictError, ValidationError


@pytest.fixture
def gce(tmp_path: Path) -> Iterator[GroupCommitEngine]:
    """A group-commit engine on a real state.db."""
    engine = GroupCommitEngine(tmp_path / "state.db", actor="uid:0")
    yield engine
    engine.close()


def _count(path: Path, sid: str) -> int:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute("SELECT COUNT(*) FROM message_rows WHERE session_id = ?", (sid,))
        return int(rows.fetchall()[0][0])
    finally:
        conn.close()


def test_concurrent_sessions_commit_in_groups_and_ack_after_commit(
    gce: GroupCommitEngine,
) -> None:
    """32 threads appending to 32 sessions share transactions; each ack is already durable."""
    sids = [gce.start_session("cli") for _ in range(32)]
    before = gce.writer.groups
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def work(sid: str) -> None:
        for i in range(10):
            gce.append_message(sid, "user", f"message {i}")
            with lock:
                seen.append((sid, _count(gce.db_path, sid)))

    threads = [threading.Thread(target=work, args=(s,)) for s in sids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    groups = gce.writer.groups - before
    assert groups < 320  # at least some transactions carried several use cases
    assert all(_count(gce.db_path, s) == 10 for s in sids)
    per_session: dict[str, list[int]] = {}
    for sid, count in seen:
        per_session.setdefault(sid, []).append(count)
    # After each acknowledged append, another connection already sees it (and all before it).
    assert all(counts == sorted(counts) and counts[0] >= 1 for counts in per_session.values())


def test_one_refusal_rolls_back_only_its_own_savepoint(gce: GroupCommitEngine) -> None:
    """In one group, a stale expected version fails alone; the other use cases commit."""
    a = gce.start_session("cli")
    b = gce.start_session("cli")
    stale = gce.get(a).version - 1
    results: dict[str, object] = {}
    gate = threading.Event()
    # Hold the writer so the next three use cases land in one group.
    blocker = gce.writer.submit(gate.wait)
    futures = {
        "ok_a": gce.writer.submit(lambda: gce.append_message(a, "user", "kept a")),
        "bad": gce.writer.submit(
            lambda: gce.append_message(a, "user", "refused", expected_version=stale)
        ),
        "ok_b": gce.writer.submit(lambda: gce.append_message(b, "user", "kept b")),
        "invalid": gce.writer.submit(lambda: gce.append_message(b, "user", "  ")),
    }
    groups = gce.writer.groups
    gate.set()
    blocker.result()
    for name, fut in futures.items():
        try:
            results[name] = fut.result()
        except Exception as exc:
            results[name] = exc
    assert gce.writer.groups - groups <= 2
    assert isinstance(results["bad"], ConflictError)
    assert isinstance(results["invalid"], ValidationError)
    assert (_count(gce.db_path, a), _count(gce.db_path, b)) == (1, 1)


def test_changes_are_reported_after_commit(tmp_path: Path) -> None:
    """The change listener hears each written session once its write committed."""
    heard: list[tuple[str, int]] = []
    engine = GroupCommitEngine(tmp_path / "state.db")
    engine.on_change = lambda sid: heard.append((sid, _count(engine.db_path, sid)))
    try:
        sid = engine.start_session("cli")
        engine.append_message(sid, "user", "hi")
        engine.set_title(sid, "greeting")
    finally:
        engine.close()
    assert heard == [(sid, 0), (sid, 1), (sid, 1)]


def test_urgent_use_case_joins_the_next_group_ahead_of_queued_ones(
    gce: GroupCommitEngine,
) -> None:
    """An urgent use case runs in the next group ahead of queued ones; acked after its commit."""
    sid = gce.start_session("cli")
    writer = gce.writer
    gate = threading.Event()
    order: list[str] = []
    blocker = writer.submit(lambda: gate.wait(10))  # holds the writer in a group
    queued = [
        writer.submit(lambda i=i: order.append(f"queued {i}"))
        for i in range(3)  # type: ignore[misc]
    ]
    urgent = writer.submit(
        lambda: (order.append("urgent"), gce.append_message(sid, "user", "now"))[1], urgent=True
    )
    gate.set()
    blocker.result(10)
    urgent.result(10)
    for f in queued:
        f.result(10)
    assert order[0] == "urgent"
    assert sorted(order[1:]) == ["queued 0", "queued 1", "queued 2"]
    assert _count(gce.db_path, sid) == 1  # stored once the future resolved


def test_an_urgent_use_case_commits_in_a_small_group_of_its_own(
    gce: GroupCommitEngine,
) -> None:
    """The group an urgent use case joins holds only the urgent ones (and at most one queued
    one): the use cases queued behind it commit in the next group, so an admission's answer
    never waits for a long group of turn writes."""
    sid = gce.start_session("cli")
    writer = gce.writer
    gate = threading.Event()
    ran: list[tuple[str, int]] = []
    blocker = writer.submit(lambda: gate.wait(10))  # holds the writer in a group
    queued = [
        writer.submit(lambda i=i: ran.append((f"queued {i}", writer.groups)))
        for i in range(6)  # type: ignore[misc]
    ]
    urgent = [
        writer.submit(
            lambda i=i: (ran.append((f"urgent {i}", writer.groups)), gce.set_title(sid, f"t{i}")),
            urgent=True,
        )
        for i in range(2)  # type: ignore[misc]
    ]
    gate.set()
    blocker.result(10)
    for f in [*urgent, *queued]:
        f.result(10)
    groups = dict(ran)
    assert groups["urgent 0"] == groups["urgent 1"]  # one group for both
    along = [name for name, group in ran if group == groups["urgent 0"]]
    assert along[:2] == ["urgent 0", "urgent 1"] and len(along) <= 3
    later = [name for name, group in ran if group > groups["urgent 0"]]
    assert len(later) >= 5  # the rest of the queue: in a later group
    assert gce.get(sid).title == "t1"


def test_get_reads_the_committed_head_and_names_a_missing_session(
    gce: GroupCommitEngine,
) -> None:
    """``get`` off the writer returns the committed head; an unknown id still raises its error."""
    sid = gce.start_session("cli", title="t")
    gce.append_message(sid, "user", "hello")
    groups = gce.writer.groups
    state = gce.get(sid)
    assert state.version >= 2 and state.message_count == 1
    assert gce.writer.groups == groups  # no trip through the writer
    from hermes_es.errors import SessionNotFoundError

    with pytest.raises(SessionNotFoundError, match="no session"):
        gce.get("nope-0000")


def _fts_hits(path: Path, word: str) -> int:
    from hermes_es.projections.catalog import connect

    conn = connect(path)
    try:
        rows = conn.execute("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH ?", (word,))
        return int(rows.fetchall()[0][0])
    finally:
        conn.close()


def _fts_consistent(path: Path) -> None:
    from hermes_es.projections.catalog import connect

    conn = connect(path)
    try:  # raises when the index and the messages rows disagree
        conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        conn.close()


def _one_group(gce: GroupCommitEngine, *fns: object) -> list[object]:
    """Run ``fns`` as use cases of one group (the writer is held until all are queued)."""
    gate = threading.Event()
    blocker = gce.writer.submit(gate.wait)
    futures = [gce.writer.submit(fn) for fn in fns]  # type: ignore[arg-type]
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


def test_a_refused_use_case_leaves_no_index_rows_and_the_others_are_indexed(
    gce: GroupCommitEngine,
) -> None:
    """The full-text rows of a group are written at its end: a use case that fails after its
    append was stored in its savepoint takes its index rows back with it; the rest are found."""
    a = gce.start_session("cli")
    b = gce.start_session("cli")

    def refused() -> None:
        gce.append_message(a, "user", "zebra crossing")
        raise ValidationError("refused after the append")

    out = _one_group(
        gce,
        lambda: gce.append_message(a, "user", "giraffe one"),
        refused,
        lambda: gce.append_message(b, "user", "giraffe two"),
    )
    assert isinstance(out[1], ValidationError)
    assert (_count(gce.db_path, a), _count(gce.db_path, b)) == (1, 1)
    assert _fts_hits(gce.db_path, "giraffe") == 2
    assert _fts_hits(gce.db_path, "zebra") == 0
    _fts_consistent(gce.db_path)


def test_a_session_forgotten_in_the_group_gets_no_waiting_index_rows(
    gce: GroupCommitEngine,
) -> None:
    """A use case that removes a session's rows after another one in the same group appended
    to it: the appended message's waiting index rows are never written (no orphan tokens)."""
    a = gce.start_session("cli")
    b = gce.start_session("cli")
    store = gce.store

    def remove() -> None:
        with store.transaction() as batch:
            store.projections.forget(batch.conn, a)
            store.recorder._delete_events(batch.conn, a)
            batch.states.pop(a, None)

    out = _one_group(
        gce,
        lambda: gce.append_message(a, "user", "okapi gone"),
        remove,
        lambda: gce.append_message(b, "user", "okapi kept"),
    )
    assert out == [0, None, 0]
    assert _fts_hits(gce.db_path, "okapi") == 1
    _fts_consistent(gce.db_path)


def test_loop_callers_are_resolved_after_the_commit(gce: GroupCommitEngine) -> None:
    """``submit_async``: each awaited result is already visible to another connection, one
    refusal fails alone, and a cancelled waiter does not disturb the writer."""
    import asyncio

    sids = [gce.start_session("cli") for _ in range(8)]
    stale = gce.get(sids[0]).version - 1

    async def main() -> list[object]:
        writer = gce.writer

        async def one(sid: str, text: str) -> int:
            seq = await writer.submit_async(lambda: gce.append_message(sid, "user", text))
            assert _count(gce.db_path, sid) >= seq + 1  # durable before we heard of it
            return seq

        abandoned = writer.submit_async(lambda: gce.append_message(sids[1], "user", "late"))
        abandoned.cancel()
        refused = writer.submit_async(
            lambda: gce.append_message(sids[0], "user", "no", expected_version=stale),
            urgent=True,
        )
        results = await asyncio.gather(
            *(one(s, f"hello {i}") for i, s in enumerate(sids)),
            refused,
            return_exceptions=True,
        )
        return list(results)

    results = asyncio.run(main())
    assert results[:8] == [0, 1, 0, 0, 0, 0, 0, 0]  # sids[1]: the abandoned append came first
    assert isinstance(results[8], ConflictError)
    assert _count(gce.db_path, sids[1]) == 2  # the cancelled waiter's use case still ran
    _fts_consistent(gce.db_path)


def test_listeners_hear_what_each_group_stored_as_the_log_holds_it(
    gce: GroupCommitEngine,
) -> None:
    """A commit listener gets each group's stored changes before the group's waiters resume;
    the stream events built from them equal the ones read back from the log."""
    import asyncio

    from hermes_es.commands import turns
    from hermes_es.queries import turns as q

    heard: list[object] = []

    async def main() -> str:
        writer = gce.writer
        writer.listen(heard.extend)
        sid = await writer.submit_async(lambda: gce.start_session("cli", title="heard"))
        assert heard and all(c.stream == sid for c in heard)  # type: ignore[attr-defined]
        await writer.submit_async(
            lambda: turns.admit(gce, sid, submission_id="s1", client_kind="cli", text="hi")
        )
        await writer.submit_async(lambda: turns.start_next(gce, sid, epoch=1))
        await writer.submit_async(
            lambda: gce.append_turn(
                sid, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
            )
        )
        with pytest.raises(ConflictError):  # refused: nothing of it is heard
            await writer.submit_async(
                lambda: gce.append_message(sid, "user", "no", expected_version=1)
            )
        return sid

    sid = asyncio.run(main())
    built = [q.stream_event(c.stream, c.version, c.event) for c in heard]  # type: ignore[attr-defined]
    assert built == q.events_since(gce.store.connection(), sid, 0)
