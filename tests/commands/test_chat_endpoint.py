"""The turn runner against a local OpenAI-compatible server: tool loop, strict mode, streaming."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from hermes_es.commands.chat import REPAIR_RESULT, Chat
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.turn_events import ReplyDelta, ToolCallStarted, ToolResultReady, TurnEvent
from hermes_es.config import HermesConfig
from hermes_es.prompts.tools import tools_for_toolsets
from hermes_es.queries.transcript import messages_of
from hermes_es.responders.openai_compat import OpenAICompatResponder

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.openai_server import FakeModel, fake_model
except ModuleNotFoundError:  # pragma: no cover
    from openai_server import FakeModel, fake_model  # type: ignore[no-redef,import-not-found]

CORE = tools_for_toolsets(["core"])


def _chat(engine: SessionEngine, work: Path, server: FakeModel, *, stream: bool = True) -> Chat:
    sid = engine.start_session("cli", tools=CORE, cwd=str(work))
    responder = OpenAICompatResponder(server.base_url, "test-model", stream=stream, timeout=10)
    return Chat(
        engine,
        sid,
        responder=responder,
        config=HermesConfig(),
        profile_dir=work,
        tools=CORE,
        workspace=work,
    )


def _workspace(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("buy milk\nand bread\n")
    return work


def test_tool_round_trip_in_one_streamed_turn(tmp_path: Path) -> None:
    """The model calls read_file; the chat runs it, sends the result, records one turn."""
    work = _workspace(tmp_path)
    events: list[TurnEvent] = []
    with fake_model() as server, SessionEngine.open(tmp_path / "state.db") as engine:
        chat = _chat(engine, work, server)
        out = chat.send("read notes.txt", on_event=events.append)
        rows = messages_of(engine.store.connection(), chat.session_id)
        first, second = server.requests
    assert out.reply == "Tool said: buy milk"
    names = [t["function"]["name"] for t in first["tools"]]
    assert names == ["list_directory", "read_file", "search_files", "session_search"]
    assert first["stream"] is True
    assert second["messages"][-2]["tool_calls"][0]["function"] == {
        "name": "read_file",
        "arguments": '{"path": "notes.txt"}',
    }
    assert second["messages"][-1] == {
        "role": "tool",
        "content": "buy milk\nand bread\n",
        "tool_call_id": "call_1",
        "name": "read_file",
    }
    assert [(r.role, r.content) for r in rows] == [
        ("user", "read notes.txt"),
        ("assistant", ""),
        ("tool", "buy milk\nand bread\n"),
        ("assistant", "Tool said: buy milk"),
    ]
    assert rows[-1].tokens_in == 20 and rows[-1].tokens_out == 10  # both calls' usage
    kinds = [type(e) for e in events]
    assert kinds[:2] == [ToolCallStarted, ToolResultReady]
    assert all(k is ReplyDelta for k in kinds[2:]) and len(kinds) > 3  # streamed in pieces
    assert "".join(e.text for e in events if isinstance(e, ReplyDelta)) == out.reply


def test_a_path_outside_the_workspace_is_an_error_result(tmp_path: Path) -> None:
    """read_file refuses ../ escapes; the model gets an error result and the turn completes."""
    work = _workspace(tmp_path)
    (tmp_path / "secret.txt").write_text("top secret")
    with fake_model() as server, SessionEngine.open(tmp_path / "state.db") as engine:
        chat = _chat(engine, work, server)
        out = chat.send("read ../secret.txt")
    assert "outside the workspace" in out.reply
    assert "top secret" not in str(server.requests)


def test_five_turns_in_strict_mode_after_a_tool_call(tmp_path: Path) -> None:
    """After a tool turn, five more turns all pass a strict endpoint (nothing unanswered)."""
    work = _workspace(tmp_path)
    with fake_model(strict=True) as server, SessionEngine.open(tmp_path / "state.db") as engine:
        chat = _chat(engine, work, server, stream=False)
        chat.send("list .")
        replies = [chat.send(f"turn {i}").reply for i in range(5)]
        chat.send("read notes.txt")
        again = _chat(engine, work, server)  # a fresh chat on a new session is fine too
        again.send("hello")
    assert replies == [f"echo: turn {i}" for i in range(5)]
    assert server.rejected == []
    assert len(server.requests) == 2 + 5 + 2 + 1


def test_a_legacy_unanswered_call_is_repaired_for_a_strict_endpoint(tmp_path: Path) -> None:
    """A session an older build left with an unanswered call passes strict mode after repair."""
    work = _workspace(tmp_path)
    legacy: list[dict[str, Any]] = [
        {"role": "user", "content": "read notes.txt"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "old",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": "{}"},
                }
            ],
        },
        {"role": "user", "content": "hello?"},
        {"role": "assistant", "content": "sorry"},
    ]
    with fake_model(strict=True) as server, SessionEngine.open(tmp_path / "state.db") as engine:
        chat = _chat(engine, work, server)
        assert server.strict_problem(legacy) is not None  # as stored, it would be refused
        engine.append_turn(chat.session_id, legacy)
        chat.reload()
        out = chat.send("still there?")
        window = engine.messages(chat.session_id)
    assert out.reply == "echo: still there?"
    assert server.rejected == []
    sent = server.requests[0]["messages"]
    assert sent[0]["role"] == "system" and sent[3] == {
        "role": "tool",
        "content": REPAIR_RESULT,
        "tool_call_id": "old",
        "name": "read_file",
    }
    assert window[2]["tool_call_id"] == "old"  # messages() gives the strict order too


def test_cancel_keeps_the_streamed_part_marked_interrupted(tmp_path: Path) -> None:
    """Setting cancel mid-stream records what arrived, finish_reason 'interrupted'."""
    work = _workspace(tmp_path)
    cancel = threading.Event()
    pieces: list[str] = []

    def on_event(event: TurnEvent) -> None:
        if isinstance(event, ReplyDelta):
            pieces.append(event.text)
            if len(pieces) == 2:
                cancel.set()

    with (
        fake_model(slow_delay=0.05) as server,
        SessionEngine.open(tmp_path / "state.db") as engine,
    ):
        chat = _chat(engine, work, server)
        out = chat.send("slow 8", on_event=on_event, cancel=cancel)
        rows = messages_of(engine.store.connection(), chat.session_id)
    assert out.interrupted
    assert out.reply == "".join(pieces) and 2 <= len(pieces) < 8
    assert (rows[-1].role, rows[-1].content, rows[-1].finish_reason) == (
        "assistant",
        out.reply,
        "interrupted",
    )


def test_cancel_wakes_a_read_blocked_on_a_stalled_stream(tmp_path: Path) -> None:
    """A stream that stalls after its first piece is cut at once by cancel, the piece kept."""
    import time

    work = _workspace(tmp_path)
    cancel = threading.Event()

    def on_event(event: TurnEvent) -> None:
        if isinstance(event, ReplyDelta):
            threading.Timer(0.3, cancel.set).start()  # while the next read blocks

    with (
        fake_model(slow_delay=20.0) as server,
        SessionEngine.open(tmp_path / "state.db") as engine,
    ):
        chat = _chat(engine, work, server)
        started = time.monotonic()
        out = chat.send("slow 3", on_event=on_event, cancel=cancel)
        waited = time.monotonic() - started
    assert out.interrupted and out.reply.startswith("piece0")
    assert waited < 10, waited
