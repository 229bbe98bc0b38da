"""The writer's hand-back hook (``submit_async(then=)``): the caller's follow-up runs on the
loop inside the hand-back itself, after the commit and before the awaiting task resumes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from hermes_es.commands.group_engine import GroupCommitEngine
from hermes_es.errors import ConflictError


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


def test_then_runs_on_the_loop_after_the_commit_before_the_waiter_resumes(
    gce: GroupCommitEngine,
) -> None:
    """``then`` gets the result on the loop's thread once the group is durable, before the
    awaiting coroutine resumes; a refused use case calls no ``then`` and raises as before."""
    import threading

    sid = gce.start_session("cli")
    stale = gce.get(sid).version - 1
    order: list[str] = []

    async def main() -> None:
        loop_thread = threading.get_ident()

        def then(seq: int) -> None:
            assert threading.get_ident() == loop_thread
            assert _count(gce.db_path, sid) == seq + 1  # committed already
            order.append(f"then {seq}")

        seq = await gce.writer.submit_async(
            lambda: gce.append_message(sid, "user", "hello"), then=then
        )
        order.append(f"resumed {seq}")
        with pytest.raises(ConflictError):
            await gce.writer.submit_async(
                lambda: gce.append_message(sid, "user", "no", expected_version=stale),
                then=lambda _: order.append("then of a refusal"),
            )

    asyncio.run(main())
    assert order == ["then 0", "resumed 0"]


def test_a_failing_then_is_logged_and_the_waiter_still_gets_its_result(
    gce: GroupCommitEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``then`` that raises does not keep its caller (or the group's others) waiting: the
    failure is logged and every waiter gets its own result."""
    sids = [gce.start_session("cli") for _ in range(3)]

    def broken(_: int) -> None:
        raise RuntimeError("hook broke")

    async def main() -> list[int]:
        writer = gce.writer
        return list(
            await asyncio.gather(
                writer.submit_async(lambda: gce.append_message(sids[0], "user", "a"), then=broken),
                writer.submit_async(lambda: gce.append_message(sids[1], "user", "b")),
                writer.submit_async(lambda: gce.append_message(sids[2], "user", "c"), then=broken),
            )
        )

    with caplog.at_level(logging.ERROR, logger="hermes.writer"):
        assert asyncio.run(main()) == [0, 0, 0]
    assert sum("hand-back callback failed" in r.getMessage() for r in caplog.records) == 2
