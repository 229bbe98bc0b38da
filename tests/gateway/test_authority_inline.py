"""The inline turn runner's hand-overs, in process on a real state.db: the streamed items of a
turn answered on the loop go out with the turn's end, the queue worker starts from the
head the admission left instead of reading it back (only while that is still the head), and
a submission to an idle session starts its turn in the admission's own use case."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from hermes_es.commands.group_engine import GroupCommitEngine
from hermes_es.config import load_profile_config
from hermes_es.gateway import protocol as p
from hermes_es.gateway.authority import Client, SessionAuthority
from hermes_es.gateway.identity import native
from hermes_es.queries import turns as q


def _run(tmp_path: Path, body: Any) -> Any:
    """Run ``body(authority, make_client)`` on a fresh loop with an owner authority on a real
    state.db and the offline responder; ``make_client(sink)`` makes a client whose frames
    are appended, decoded, to ``sink``."""
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
        principal = native(1000, profile="default", issuer="test", purpose="interactive")

        def make_client(sink: list[dict[str, Any]]) -> Client:
            return Client(principal, "cli", lambda frame: sink.append(json.loads(frame)))

        try:
            return await body(authority, make_client)
        finally:
            authority.close()
            engine.close()

    return asyncio.run(main())


async def _turn(authority: SessionAuthority, client: Client, sid: str, sub: str) -> int:
    admitted = await authority.submit(
        client, p.SubmitParams(session_id=sid, submission_id=sub, text=f"prompt {sub}")
    )
    turn: int = admitted["turn"]
    deadline = asyncio.get_running_loop().time() + 30
    while not any(
        e.type == "hermes.turn.finished" and e.event["turn"] == turn
        for e in q.events_since(authority._read(), sid, 0)
    ):
        assert asyncio.get_running_loop().time() < deadline, "the turn did not finish"
        await asyncio.sleep(0.01)
    while not authority.runners[sid].done():  # (the end's hand-back is on its way)
        assert asyncio.get_running_loop().time() < deadline, "the turn's runner did not end"
        await asyncio.sleep(0.01)
    return turn


async def _settled(authority: SessionAuthority) -> int:
    """The writer's use case count once it stopped moving."""
    while True:
        jobs = authority.engine.writer.jobs
        await asyncio.sleep(0.05)
        if authority.engine.writer.jobs == jobs:
            return jobs


def _kinds(frames: list[dict[str, Any]], turn: int) -> list[str]:
    """What a client received from ``turn``'s admission to its finish, in order: stored event
    types, and ``stream`` for a ``turn.stream`` item."""
    out: list[str] = []
    for frame in frames:
        params = frame.get("params") or {}
        if frame.get("method") == "turn.stream" and out:
            out.append("stream")
        elif frame.get("method") == "session.event":
            kind, of = params["type"], params["event"].get("turn")
            if out or (kind == "hermes.turn.admitted" and of == turn):
                out.append(kind)
            if kind == "hermes.turn.finished" and of == turn:
                break
    return out


def test_an_inline_turns_stream_goes_out_with_its_end_before_the_reply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn answered on the loop: both attached clients get, in this order, the turn's
    start, the user's message, its ``turn.stream`` item, the reply and the finish; the item
    is written only once the turn's end has committed (with the end's events, one burst)."""
    monkeypatch.setenv("HERMES_RESPONDER", "offline")

    async def body(authority: SessionAuthority, make_client: Any) -> None:
        mine: list[dict[str, Any]] = []
        theirs: list[dict[str, Any]] = []
        submitter, watcher = make_client(mine), make_client(theirs)
        sid = (await authority.create(submitter, p.CreateParams()))["session_id"]
        authority.attach(watcher, sid)
        await _turn(authority, submitter, sid, "first")  # threaded: builds the prompt
        committed_when_streamed: list[bool] = []
        plain = watcher.send

        def watching(frame: bytes) -> None:
            if b'"turn.stream"' in frame:  # is the turn's end in the log already?
                events = q.events_since(authority._read(), sid, 0)
                committed_when_streamed.append(events[-1].type == "hermes.turn.finished")
            plain(frame)

        watcher.send = watching
        turn = await _turn(authority, submitter, sid, "second")
        assert sid in authority.chats  # it ran inline (the chat was in memory)
        expected = [
            "hermes.turn.admitted",
            "hermes.turn.started",
            "hermes.message.appended",
            "stream",
            "hermes.message.appended",
            "hermes.turn.finished",
        ]
        assert _kinds(mine, turn) == expected
        assert _kinds(theirs, turn) == expected
        assert committed_when_streamed == [True]
        assert not authority._held  # nothing left held once the turn is over

    _run(tmp_path, body)


def test_the_queue_worker_starts_from_the_admissions_head_while_it_is_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an admission the session's queue worker uses the head that admission left (no
    read of the head for turns that run inline); a remembered head that is no longer the
    committed one, or any on a team (another gateway may write the log), is read instead."""
    monkeypatch.setenv("HERMES_RESPONDER", "offline")
    reads: list[str] = []
    read_head = q.head

    def counted(conn: Any, session_id: str) -> Any:
        reads.append(session_id)
        return read_head(conn, session_id)

    async def body(authority: SessionAuthority, make_client: Any) -> None:
        client = make_client([])
        sid = (await authority.create(client, p.CreateParams()))["session_id"]
        await _turn(authority, client, sid, "first")
        monkeypatch.setattr(q, "head", counted)
        for n in range(3):
            await _turn(authority, client, sid, f"inline {n}")
        assert reads == []  # every worker started from the admission's head
        stale = read_head(authority._read(), sid)
        assert stale is not None
        await authority.mutate(
            client, "session.rename", p.MutateParams(session_id=sid, title="renamed")
        )
        reads.clear()
        authority._heads[sid] = stale  # older than what was stored since
        fresh = authority._known_head(sid)
        assert reads == [sid] and fresh is not None and fresh.title == "renamed"
        authority._heads[sid] = fresh
        authority.fenced = True
        assert authority._known_head(sid) == fresh and reads == [sid, sid]

    _run(tmp_path, body)


def test_an_idle_sessions_turn_starts_in_its_admissions_use_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a turn ran on the loop, the next submission to the idle session is admitted and
    started, its user message stored, in one use case (then the end: two a turn): both
    attached clients get the same stream in the same order (admitted, started, the user
    message, the item, the reply, the finish); the same submission id again answers
    duplicate and starts nothing; the window in memory stays the log's."""
    monkeypatch.setenv("HERMES_RESPONDER", "offline")

    async def body(authority: SessionAuthority, make_client: Any) -> None:
        mine: list[dict[str, Any]] = []
        theirs: list[dict[str, Any]] = []
        submitter, watcher = make_client(mine), make_client(theirs)
        sid = (await authority.create(submitter, p.CreateParams()))["session_id"]
        authority.attach(watcher, sid)
        await _turn(authority, submitter, sid, "first")  # threaded: builds the prompt
        await _turn(authority, submitter, sid, "second")  # on the loop: admit, begin, end
        jobs = await _settled(authority)
        turn = await _turn(authority, submitter, sid, "third")
        assert await _settled(authority) - jobs == 2
        expected = [
            "hermes.turn.admitted",
            "hermes.turn.started",
            "hermes.message.appended",
            "stream",
            "hermes.message.appended",
            "hermes.turn.finished",
        ]
        assert _kinds(mine, turn) == expected
        assert _kinds(theirs, turn) == expected
        again = await authority.submit(
            submitter, p.SubmitParams(session_id=sid, submission_id="third", text="prompt third")
        )
        assert again["turn"] == turn and again["duplicate"]
        assert await _settled(authority) - jobs == 3  # the duplicate's admission only
        events = q.events_since(authority._read(), sid, 0)
        assert [e.event["turn"] for e in events if e.type == "hermes.turn.started"] == [1, 2, 3]
        chat = authority.chats[sid]
        assert [m["content"] for m in chat.memory][-2:] == [
            "prompt third",
            'Offline reply: you said "prompt third" (2 words).',
        ]
        assert len(chat.memory) == 6 and not authority._held

    _run(tmp_path, body)


def test_submissions_racing_to_an_idle_session_run_first_in_first_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three submissions to an idle session at once (none waits for another's answer): the
    first starts with its admission, the others queue behind it and run in order through
    the queue worker; every turn completes once, and the stream is gapless."""
    monkeypatch.setenv("HERMES_RESPONDER", "offline")

    async def body(authority: SessionAuthority, make_client: Any) -> None:
        frames: list[dict[str, Any]] = []
        client = make_client(frames)
        sid = (await authority.create(client, p.CreateParams()))["session_id"]
        await _turn(authority, client, sid, "first")
        await _turn(authority, client, sid, "second")
        answers = await asyncio.gather(
            *(
                authority.submit(
                    client, p.SubmitParams(session_id=sid, submission_id=f"r{n}", text=f"r {n}")
                )
                for n in range(3)
            )
        )
        assert [a["turn"] for a in answers] == [3, 4, 5]
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            events = q.events_since(authority._read(), sid, 0)
            finished = [e.event for e in events if e.type == "hermes.turn.finished"]
            if len(finished) == 5:
                break
            assert asyncio.get_running_loop().time() < deadline, "the turns did not finish"
            await asyncio.sleep(0.01)
        assert [f["turn"] for f in finished] == [1, 2, 3, 4, 5]
        assert {f["outcome"] for f in finished} == {"completed"}
        started = [e.event["turn"] for e in events if e.type == "hermes.turn.started"]
        assert started == [1, 2, 3, 4, 5]
        replies = [
            e.event["message"]["content"]
            for e in events
            if e.type == "hermes.message.appended" and e.event["message"]["role"] == "assistant"
        ]
        assert replies[2:] == [f'Offline reply: you said "r {n}" (2 words).' for n in range(3)]
        pushed = [m["params"]["sequence"] for m in frames if m.get("method") == "session.event"]
        assert pushed == list(range(pushed[0], pushed[0] + len(pushed)))

    _run(tmp_path, body)


def test_live_event_frames_are_the_bytes_a_replay_of_the_log_encodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the fan-out writes for each stored event (built from the event the writer just
    stored) is byte for byte the frame of the same event read back from the log."""
    monkeypatch.setenv("HERMES_RESPONDER", "offline")

    async def body(authority: SessionAuthority, make_client: Any) -> None:
        raw: list[bytes] = []
        client = make_client([])
        plain = client.send

        def keep(frame: bytes) -> None:
            raw.append(frame)
            plain(frame)

        client.send = keep
        sid = (await authority.create(client, p.CreateParams()))["session_id"]
        for n in range(3):
            await _turn(authority, client, sid, f"t{n}")
        await authority.mutate(client, "session.rename", p.MutateParams(session_id=sid, title="x"))
        live = [f for f in raw if b'"session.event"' in f]
        after = json.loads(live[0])["params"]["sequence"] - 1
        replay = [
            p.encode(p.Notification(method="session.event", params=e))
            for e in q.events_since(authority._read(), sid, after)
        ]
        assert len(live) >= 15 and live == replay

    _run(tmp_path, body)
