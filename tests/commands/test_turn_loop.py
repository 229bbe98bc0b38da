"""The turn runner's tool loop, its turn events, cancel, repair of unanswered calls."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import msgspec

from hermes_es.commands.chat import REPAIR_RESULT, Chat, send_order
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.turn_events import ReplyDelta, ToolCallStarted, ToolResultReady, TurnEvent
from hermes_es.config import HermesConfig
from hermes_es.queries.transcript import messages_of
from hermes_es.responders.base import ChatMessage, ToolCall, TurnResult
from hermes_es.responders.offline import OfflineResponder


def _chat(engine: SessionEngine, tmp_path: Path, responder: Any = None, **config: Any) -> Chat:
    sid = engine.start_session("cli", tools=["read_file", "echo"], cwd=str(tmp_path))
    return Chat(
        engine,
        sid,
        responder=responder or OfflineResponder(),
        config=HermesConfig(**config),
        profile_dir=tmp_path,
        tools=["read_file", "echo"],
        workspace=tmp_path,
    )


def test_offline_tool_turn_reports_call_result_and_reply_events(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """A /tool turn reports tool.call, tool.result then the reply delta, and stores all three."""
    events: list[TurnEvent] = []
    chat = _chat(engine, tmp_path)
    out = chat.send("/tool word_count a b c", on_event=events.append)
    rows = messages_of(engine.store.connection(), chat.session_id)
    call_id = out.messages[0].tool_calls[0].id
    assert events == [
        ToolCallStarted(call_id=call_id, name="word_count", arguments='{"text":"a b c"}'),
        ToolResultReady(call_id=call_id, name="word_count", content="3"),
        ReplyDelta(text="Tool results: word_count → 3"),
    ]
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[2].tool_call_id == call_id and rows[2].content == "3"
    assert out.reply == "Tool results: word_count → 3" and not out.interrupted


def test_turn_events_encode_with_their_tags() -> None:
    """Turn events serialise as tagged JSON objects a server can forward as they are."""
    encoded = msgspec.json.encode(ToolResultReady(call_id="c", name="n", content="x"))
    assert msgspec.json.decode(encoded) == {
        "type": "tool.result",
        "call_id": "c",
        "name": "n",
        "content": "x",
        "is_error": False,
    }
    decoded = msgspec.json.decode(b'{"type":"reply.delta","text":"hi"}', type=TurnEvent)
    assert decoded == ReplyDelta(text="hi")


def test_unknown_tool_yields_an_error_result(engine: SessionEngine, tmp_path: Path) -> None:
    """A call to a tool the registry lacks is answered with an error result, not a crash."""
    events: list[TurnEvent] = []
    chat = _chat(engine, tmp_path)
    chat.send("/tool nosuch x", on_event=events.append)
    [result] = [e for e in events if isinstance(e, ToolResultReady)]
    assert result.is_error and "unknown tool 'nosuch'" in result.content


class _Looping:
    """A responder that always calls read_file (never answers), to hit max_turns."""

    name = "loop"
    can_see_images = False

    def __init__(self) -> None:
        self.calls = 0

    def respond(self, system_prompt: str, messages: list[ChatMessage], **_: Any) -> TurnResult:
        self.calls += 1
        call = ToolCall(id=f"c{self.calls}", name="read_file", arguments='{"path":"a.txt"}')
        return TurnResult(messages=[ChatMessage(role="assistant", tool_calls=[call])])

    def summarize(self, messages: list[ChatMessage]) -> str:
        return "s"


def test_max_turns_stops_the_loop_with_every_call_answered(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """At max_turns the loop stops; the last calls get 'not run' results (none unanswered)."""
    (tmp_path / "a.txt").write_text("alpha")
    responder = _Looping()
    chat = _chat(engine, tmp_path, responder, max_turns=3)
    chat.send("go")
    rows = messages_of(engine.store.connection(), chat.session_id)
    assert responder.calls == 3
    tools = [r for r in rows if r.role == "tool"]
    assert [t.content for t in tools[:2]] == ["alpha", "alpha"]
    assert "max_turns (3" in tools[2].content
    assert {t.tool_call_id for t in tools} == {"c1", "c2", "c3"}


class _Cancelling(OfflineResponder):
    """Streams two pieces, with the caller cancelling after the first."""

    def __init__(self, cancel: threading.Event) -> None:
        super().__init__()
        self.cancel = cancel

    def respond(self, system_prompt: str, messages: list[ChatMessage], **kw: Any) -> TurnResult:
        kw["on_delta"]("partial ")
        self.cancel.set()
        return TurnResult(
            messages=[ChatMessage(role="assistant", content="partial ")], interrupted=True
        )


def test_cancel_keeps_what_arrived_marked_interrupted(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """A cancelled turn records the partial reply with finish_reason 'interrupted'."""
    cancel = threading.Event()
    chat = _chat(engine, tmp_path, _Cancelling(cancel))
    out = chat.send("hello", cancel=cancel)
    rows = messages_of(engine.store.connection(), chat.session_id)
    assert out.interrupted and out.reply == "partial "
    assert [(r.role, r.content, r.finish_reason) for r in rows] == [
        ("user", "hello", None),
        ("assistant", "partial ", "interrupted"),
    ]


def test_legacy_unanswered_call_is_repaired_as_an_event(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """A stored tool call without a result gets an 'interrupted' result on the next turn,
    recorded as its own event, and is sent right after its call."""
    seen: list[list[ChatMessage]] = []

    class Recording(OfflineResponder):
        def respond(self, system_prompt: str, messages: list[ChatMessage], **kw: Any) -> TurnResult:
            seen.append(list(messages))
            return super().respond(system_prompt, messages, **kw)

    chat = _chat(engine, tmp_path, Recording())
    engine.append_turn(
        chat.session_id,
        [
            {"role": "user", "content": "look"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "old1", "name": "read_file", "arguments": "{}"}],
            },
            {"role": "user", "content": "still there?"},
            {"role": "assistant", "content": "yes"},
        ],
    )
    chat.reload()
    chat.send("next")
    rows = messages_of(engine.store.connection(), chat.session_id)
    topics = [
        t
        for (t,) in engine.store.connection().execute(
            "SELECT topic FROM events WHERE originator_id = ? ORDER BY originator_version",
            (chat.session_id,),
        )
    ]
    repaired = [r for r in rows if r.tool_call_id == "old1"]
    assert [r.content for r in repaired] == [REPAIR_RESULT]
    # history, prompt, then the repair, the user message and the reply: one event each
    assert topics[3:] == ["hermes.message.appended"] * 3
    assert [r.role for r in rows][-3:] == ["tool", "user", "assistant"]
    sent = seen[0]
    index = next(i for i, m in enumerate(sent) if m.tool_calls)
    assert sent[index + 1].role == "tool" and sent[index + 1].tool_call_id == "old1"


def test_send_order_moves_results_to_their_call_and_drops_orphans() -> None:
    """Tool results sit right after the assistant that called them; orphans are dropped."""
    window = [
        {"role": "tool", "tool_call_id": "gone", "content": "orphan"},
        {"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]},
        {"role": "user", "content": "u"},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
    ]
    ordered = send_order(window)
    assert [m.get("tool_call_id") or m["role"] for m in ordered] == ["assistant", "a", "b", "user"]
