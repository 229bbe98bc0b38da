"""The gateway's turn runner in process: turns on the loop, the threaded runner, the chat cache."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hermes_es.commands.chat import context_window, dict_to_chat
from hermes_es.commands.group_engine import GroupCommitEngine
from hermes_es.commands.openai_messages import send_order
from hermes_es.config import load_profile_config
from hermes_es.gateway import protocol as p
from hermes_es.gateway.authority import Client, SessionAuthority
from hermes_es.gateway.identity import native
from hermes_es.queries.turns import events_since


def _stored_window(authority: SessionAuthority, sid: str) -> list[Any]:
    """The window the responder would see, read from the log."""
    return [dict_to_chat(m) for m in send_order(context_window(authority._read(), sid))]


async def _until(predicate: Any, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.01)


async def _settled(authority: SessionAuthority) -> int:
    """The writer's use case count once it stopped moving (a commit is visible to readers a
    moment before the writer counts its group)."""
    writer = authority.engine.writer
    while True:
        jobs = writer.jobs
        await asyncio.sleep(0.05)
        if writer.jobs == jobs:
            return jobs


def _run(tmp_path: Path, body: Any, *, max_chats: int = 256) -> Any:
    """Run ``body(authority, client)`` on a fresh loop, with an owner authority on a real
    state.db and the offline responder."""
    home = tmp_path / "home"
    (home / "profiles" / "default").mkdir(parents=True)

    async def main() -> Any:
        engine = GroupCommitEngine(tmp_path / "state.db", actor="gateway")
        authority = SessionAuthority(
            engine,
            loaded=load_profile_config(home, "default"),
            profile="default",
            profile_dir=home / "profiles" / "default",
            epoch=1,
        )
        authority.max_chats = max_chats
        principal = native(1000, profile="default", issuer="test", purpose="interactive")
        client = Client(principal, "cli", lambda frame: None)
        try:
            return await body(authority, client)
        finally:
            authority.close()
            engine.close()

    return asyncio.run(main())


async def _turn(authority: SessionAuthority, client: Client, sid: str, sub: str, text: str) -> int:
    admitted = await authority.submit(
        client, p.SubmitParams(session_id=sid, submission_id=sub, text=text)
    )
    turn: int = admitted["turn"]

    def finished() -> bool:
        return any(
            e.type == "hermes.turn.finished" and e.event["turn"] == turn
            for e in events_since(authority._read(), sid, 0)
        )

    await _until(finished)
    await _until(lambda: sid not in authority.runners or authority.runners[sid].done())
    return turn


def test_turns_after_the_first_run_on_the_loop_and_keep_the_window_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a session's first turn (threaded: it builds the prompt), its turns run on the
    loop: the first of them through three use cases (admit, begin, end), the next ones
    through two (the admission and the begin in one, then the end); the window the chat
    keeps in memory then equals the one read from the log, and every turn completed with
    its user message and reply."""
    monkeypatch.setenv("HERMES_RESPONDER", "offline")

    async def body(authority: SessionAuthority, client: Client) -> None:
        created = await authority.create(client, p.CreateParams())
        sid = created["session_id"]
        await _turn(authority, client, sid, "s1", "first")
        jobs = await _settled(authority)
        for n in range(2, 5):
            await _turn(authority, client, sid, f"s{n}", f"turn {n}")
        assert await _settled(authority) - jobs == 3 + 2 * 2
        chat = authority.chats[sid]
        assert chat.window() == _stored_window(authority, sid)
        finished = [
            e.event
            for e in events_since(authority._read(), sid, 0)
            if e.type == "hermes.turn.finished"
        ]
        assert [f["outcome"] for f in finished] == ["completed"] * 4
        assert [f["seqs"] for f in finished] == [[0, 1], [2, 3], [4, 5], [6, 7]]
        texts = [m["content"] for m in chat.memory]
        assert texts[-2:] == ["turn 4", 'Offline reply: you said "turn 4" (2 words).']

    _run(tmp_path, body)


def test_a_turn_that_runs_tools_goes_to_a_turn_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompt the responder answers with a tool call (I/O) is not run on the loop: the
    threaded runner runs it, tool call and result included, and the turn completes."""
    monkeypatch.setenv("HERMES_RESPONDER", "offline")

    async def body(authority: SessionAuthority, client: Client) -> None:
        sid = (await authority.create(client, p.CreateParams()))["session_id"]
        await _turn(authority, client, sid, "a", "hello")
        jobs = await _settled(authority)
        await _turn(authority, client, sid, "b", "run: echo from a tool")
        assert await _settled(authority) - jobs == 5  # admit, start, user, turn, finish
        roles = [m["role"] for m in authority.chats[sid].memory]
        assert roles[-4:] == ["user", "assistant", "tool", "assistant"]
        await _turn(authority, client, sid, "c", "plain again")
        assert authority.chats[sid].window() == _stored_window(authority, sid)

    _run(tmp_path, body)


def test_the_chat_cache_keeps_the_most_recent_sessions_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most ``max_chats`` sessions keep their chat in memory (least recently used leave);
    a session whose chat left runs its next turn from the log, and nothing is lost."""
    monkeypatch.setenv("HERMES_RESPONDER", "offline")

    async def body(authority: SessionAuthority, client: Client) -> None:
        sids = [(await authority.create(client, p.CreateParams()))["session_id"] for _ in "abc"]
        for round_ in range(2):
            for n, sid in enumerate(sids):
                await _turn(authority, client, sid, f"{round_}-{n}", f"round {round_} of {n}")
                assert len(authority.chats) <= 2
        assert list(authority.chats) == sids[1:]
        for sid in sids:
            window = context_window(authority._read(), sid)
            assert [m["content"] for m in window if m["role"] == "user"] == [
                f"round {r} of {sids.index(sid)}" for r in range(2)
            ]

    _run(tmp_path, body, max_chats=2)
