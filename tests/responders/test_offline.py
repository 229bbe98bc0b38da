"""The offline responder: deterministic echoes, tool calls by trigger line, extractive summaries."""

from __future__ import annotations

from typing import Any

import msgspec

from hermes_es.responders.base import ChatMessage, Responder, ToolCall, text_of
from hermes_es.responders.offline import OfflineResponder


def _user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def test_same_input_gives_identical_turn() -> None:
    """Two responders given the same input produce byte-identical turns."""
    window = [_user("hello"), ChatMessage(role="assistant", content="hi"), _user("/tool echo x")]
    first = OfflineResponder().respond("sys", window, model="m", reasoning="low")
    second = OfflineResponder().respond("sys", list(window), model="m", reasoning="low")
    assert msgspec.json.encode(first) == msgspec.json.encode(second)


def test_plain_reply_echoes_last_user_message() -> None:
    """Without a trigger the turn is one assistant reply quoting the last user message."""
    window = [_user("first question"), ChatMessage(role="assistant", content="ok"), _user("why?")]
    result = OfflineResponder().respond("sys", window, model="demo-model")
    assert [m.role for m in result.messages] == ["assistant"]
    reply = result.messages[0]
    assert reply.content == 'Offline reply: you said "why?" (1 word).'
    assert reply.tool_calls == []
    assert reply.finish_reason == "stop"
    assert result.model == "demo-model"


def test_prompt_tokens_of_a_growing_window_match_a_fresh_count() -> None:
    """The prompt token estimate, counted only past the window a responder saw last (the same
    message objects again), is the estimate of a fresh responder for every window: grown by
    new messages, with an earlier message replaced, shortened, or another session's."""
    kept = OfflineResponder()
    window: list[ChatMessage] = [_user("first question")]
    other = [_user("another session's window, longer than the first one")]

    def both(messages: list[ChatMessage]) -> tuple[int, int]:
        seen = kept.respond("sys prompt", messages, model="m").usage.prompt_tokens
        fresh = OfflineResponder().respond("sys prompt", messages, model="m").usage.prompt_tokens
        return seen, fresh

    for turn in range(6):
        seen, fresh = both(window)
        assert seen == fresh
        seen, fresh = both(other)  # (the same first message object each time)
        assert seen == fresh
        call = ToolCall(id=f"c{turn}", name="echo", arguments='{"text": "' + "x" * turn + '"}')
        window = [
            *window,
            ChatMessage(role="assistant", content="reply " * turn, tool_calls=[call]),
            _user(f"question {turn}"),
        ]
    replaced = [window[0], _user("a different second message " * 3), *window[2:]]
    for messages in (replaced, window[:3], window):
        seen, fresh = both(messages)
        assert seen == fresh


def test_model_defaults_to_offline_name() -> None:
    """An empty model name is reported as ``offline``."""
    result = OfflineResponder().respond("", [_user("hi")], model="")
    assert result.model == "offline"


def test_long_user_message_is_cut_in_the_reply() -> None:
    """The echoed excerpt is bounded and ends with an ellipsis."""
    result = OfflineResponder().respond("", [_user("word " * 100)], model="m")
    reply = text_of(result.messages[0].content)
    assert "…" in reply
    assert "(100 words)" in reply
    assert len(reply) < 140


def test_tool_trigger_asks_for_the_call_then_reports_its_result() -> None:
    """``/tool word_count`` yields one assistant call; given the result, a reply reporting it."""
    responder = OfflineResponder()
    asked = responder.respond("sys", [_user("/tool word_count a b c")], model="m")
    [call_msg] = asked.messages
    assert call_msg.role == "assistant"
    assert call_msg.finish_reason == "tool_calls"
    [call] = call_msg.tool_calls
    assert call.name == "word_count"
    assert msgspec.json.decode(call.arguments) == {"text": "a b c"}
    result = ChatMessage(role="tool", content="3", tool_call_id=call.id, name="word_count")
    window = [_user("/tool word_count a b c"), call_msg, result]
    [final] = responder.respond("sys", window, model="m").messages
    assert final.role == "assistant"
    assert final.tool_calls == []
    assert final.content == "Tool results: word_count → 3"


def test_run_trigger_and_several_tools_in_one_call() -> None:
    """Every trigger line becomes one call with its own id, in line order."""
    text = "Please do this.\nrun: echo hello world\n/tool nosuch thing"
    [asked] = OfflineResponder().respond("", [_user(text)], model="m").messages
    calls = asked.tool_calls
    assert [c.name for c in calls] == ["echo", "nosuch"]
    assert len({c.id for c in calls}) == 2
    assert [msgspec.json.decode(c.arguments) for c in calls] == [
        {"text": "hello world"},
        {"text": "thing"},
    ]


def test_call_ids_differ_between_turns_with_same_text() -> None:
    """The same trigger later in the conversation gets a different call id."""
    responder = OfflineResponder()
    first = responder.respond("", [_user("/tool echo a")], model="m")
    [call] = first.messages[0].tool_calls
    answered = ChatMessage(role="tool", content="a", tool_call_id=call.id, name="echo")
    window = [_user("/tool echo a"), *first.messages, answered, _user("/tool echo a")]
    second = responder.respond("", window, model="m")
    assert first.messages[0].tool_calls[0].id != second.messages[0].tool_calls[0].id


def test_tools_run_only_for_a_pending_user_message() -> None:
    """When the window ends with tool results, no new tool call is made (no agent-loop repeat)."""
    first = OfflineResponder().respond("", [_user("/tool echo a")], model="m")
    [call] = first.messages[0].tool_calls
    answered = ChatMessage(role="tool", content="a", tool_call_id=call.id, name="echo")
    window = [_user("/tool echo a"), first.messages[0], answered]
    again = OfflineResponder().respond("", window, model="m")
    assert [m.role for m in again.messages] == ["assistant"]
    assert again.messages[0].tool_calls == []


def test_usage_is_counted_deterministically() -> None:
    """Usage is a positive character-based estimate that grows with the prompt."""
    short = OfflineResponder().respond("", [_user("hi")], model="m").usage
    longer = OfflineResponder().respond("s" * 400, [_user("hi")], model="m").usage
    assert short.prompt_tokens > 0
    assert short.completion_tokens > 0
    assert longer.prompt_tokens == short.prompt_tokens + 100


def test_reasoning_effort_is_recorded_on_the_reply() -> None:
    """A requested reasoning effort shows up as reasoning text; none requested, none given."""
    with_effort = OfflineResponder().respond("", [_user("hi")], model="m", reasoning="high")
    without = OfflineResponder().respond("", [_user("hi")], model="m")
    assert "high" in (with_effort.messages[-1].reasoning or "")
    assert without.messages[-1].reasoning is None


def test_images_are_mentioned_not_seen() -> None:
    """Image parts are counted in the reply; the offline responder says it cannot see them."""
    content: list[dict[str, Any]] = [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": "file:///tmp/x.png"}},
    ]
    responder = OfflineResponder()
    result = responder.respond("", [ChatMessage(role="user", content=content)], model="m")
    assert responder.can_see_images is False
    assert text_of(result.messages[0].content) == (
        'Offline reply: you said "what is this" (3 words).'
        " I cannot see the 1 attached image(s) offline."
    )


def test_empty_window_gets_a_greeting() -> None:
    """With no user message at all the responder still answers deterministically."""
    result = OfflineResponder().respond("sys", [], model="m")
    assert result.messages[0].content == "Offline responder ready: send a message to begin."


def test_summary_is_extractive() -> None:
    """The summary keeps first sentences of user turns and first lines of assistant turns."""
    window = [
        ChatMessage(role="system", content="secret system text"),
        _user("Fix the login bug. It fails on Safari only."),
        ChatMessage(role="assistant", content="Looking at auth.py now.\nMore detail here."),
        ChatMessage(
            role="assistant",
            tool_calls=[ToolCall(id="c1", name="read_file")],
        ),
        ChatMessage(role="tool", content="tool output body", tool_call_id="c1", name="read_file"),
        _user("Thanks!"),
    ]
    summary = OfflineResponder().summarize(window)
    assert summary.splitlines() == [
        "Summary of 6 earlier messages:",
        "- user: Fix the login bug.",
        "- assistant: Looking at auth.py now.",
        "- assistant called: read_file",
        "- user: Thanks!",
    ]


def test_summary_is_bounded() -> None:
    """A long conversation is summarised within the character cap, saying how much was cut."""
    window = [_user(f"Message number {i} is here. Extra.") for i in range(200)]
    summary = OfflineResponder(summary_chars=300).summarize(window)
    assert len(summary) <= 300
    assert "- user: Message number 0 is here." in summary
    assert summary.splitlines()[-1].endswith("more lines omitted)")
    assert summary == OfflineResponder(summary_chars=300).summarize(window)


def test_summary_of_nothing() -> None:
    """Summarising an empty window says so instead of returning an empty string."""
    assert OfflineResponder().summarize([]) == "No earlier messages to summarize."


def test_offline_responder_satisfies_protocol() -> None:
    """OfflineResponder can be used wherever a Responder is expected."""
    responder: Responder = OfflineResponder()
    assert responder.name == "offline"
