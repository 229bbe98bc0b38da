"""The built-in offline responder: deterministic, no network, no key.

It echoes the last user message, runs a tiny deterministic tool set when asked
(``/tool <name> <args>`` or ``run: <name> <args>`` on a line of their own), and summarises
extractively. The same input always gives the same output: no randomness, no clock.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType

import msgspec

from hermes_es.responders.base import (
    ChatMessage,
    ToolCall,
    TurnResult,
    Usage,
    image_count,
    text_of,
)

OFFLINE_MODEL = "offline"
"""Model name reported when the caller names none."""

_TRIGGER = re.compile(r"^\s*(?:/tool\s+|run:\s*)(?P<name>\S+)[ \t]*(?P<args>.*?)\s*$", re.M)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_EXCERPT_CHARS = 80
_ITEM_CHARS = 160


def _echo(text: str) -> str:
    """Return the argument text unchanged."""
    return text


def _word_count(text: str) -> str:
    """Return how many whitespace-separated words the argument text has."""
    return str(len(text.split()))


TOOLS: Mapping[str, Callable[[str], str]] = MappingProxyType(
    {"echo": _echo, "word_count": _word_count}
)
"""The offline tool set: every tool is a pure function of its argument text."""


class OfflineResponder:
    """Deterministic responder used by default, by ``make demo`` and by tests."""

    def __init__(self, *, summary_chars: int = 2000) -> None:
        """Create the responder; summaries are capped at ``summary_chars`` characters."""
        self.summary_chars = summary_chars

    @property
    def name(self) -> str:
        """Responder kind: ``offline``."""
        return "offline"

    @property
    def can_see_images(self) -> bool:
        """The offline responder never looks at images."""
        return False

    def respond(
        self,
        system_prompt: str,
        messages: list[ChatMessage],
        *,
        model: str,
        reasoning: str | None = None,
    ) -> TurnResult:
        """Answer the last user message, running any requested offline tools first."""
        calls = _tool_calls(_pending_user_text(messages), _call_id_prefix(system_prompt, messages))
        produced: list[ChatMessage] = []
        if calls:
            produced.append(
                ChatMessage(role="assistant", tool_calls=calls, finish_reason="tool_calls")
            )
            produced.extend(_run_tool(call) for call in calls)
            reply = _tool_reply(produced[1:])
        else:
            reply = _echo_reply(messages)
        produced.append(
            ChatMessage(
                role="assistant",
                content=reply,
                reasoning=_reasoning_note(reasoning),
                finish_reason="stop",
            )
        )
        usage = Usage(
            prompt_tokens=_estimate_tokens([system_prompt, *map(_message_text, messages)]),
            completion_tokens=_estimate_tokens([_message_text(m) for m in produced]),
        )
        return TurnResult(messages=produced, usage=usage, model=model or OFFLINE_MODEL)

    def summarize(self, messages: list[ChatMessage]) -> str:
        """Summarise extractively: first sentence of user turns, key line of assistant turns."""
        items = [item for item in map(_summary_item, messages) if item]
        if not items:
            return "No earlier messages to summarize."
        lines = [f"Summary of {len(messages)} earlier messages:"]
        used = len(lines[0])
        for index, item in enumerate(items):
            omitted = f"… ({len(items) - index} more lines omitted)"
            if used + 1 + len(item) + 1 + len(omitted) > self.summary_chars:
                lines.append(omitted)
                break
            lines.append(item)
            used += 1 + len(item)
        return "\n".join(lines)[: self.summary_chars]


def _pending_user_text(messages: list[ChatMessage]) -> str | None:
    """Return the text of the final message when it is a user message still to be answered."""
    if messages and messages[-1].role == "user":
        return text_of(messages[-1].content)
    return None


def _call_id_prefix(system_prompt: str, messages: list[ChatMessage]) -> str:
    """Return a call-id prefix derived from the whole input, so ids differ between turns."""
    digest = hashlib.sha256(system_prompt.encode())
    digest.update(msgspec.json.encode(messages))
    return "call_" + digest.hexdigest()[:12]


def _tool_calls(text: str | None, prefix: str) -> list[ToolCall]:
    """Return one tool call per trigger line in ``text``."""
    if text is None:
        return []
    return [
        ToolCall(
            id=f"{prefix}_{index}",
            name=match["name"],
            arguments=msgspec.json.encode({"text": match["args"]}).decode(),
        )
        for index, match in enumerate(_TRIGGER.finditer(text))
    ]


def _run_tool(call: ToolCall) -> ChatMessage:
    """Run one offline tool and return its result message, answering ``call.id``."""
    tool = TOOLS.get(call.name)
    if tool is None:
        known = ", ".join(sorted(TOOLS))
        result = f"error: unknown tool {call.name!r} (offline tools: {known})"
    else:
        arguments = msgspec.json.decode(call.arguments, type=dict[str, str])
        result = tool(arguments.get("text", ""))
    return ChatMessage(role="tool", content=result, tool_call_id=call.id, name=call.name)


def _tool_reply(results: list[ChatMessage]) -> str:
    """Return the final reply that reports each tool result."""
    parts = [f"{result.name} → {_excerpt(text_of(result.content))}" for result in results]
    return "Tool results: " + "; ".join(parts)


def _echo_reply(messages: list[ChatMessage]) -> str:
    """Return a short echo-style answer to the last user message."""
    for message in reversed(messages):
        if message.role == "user":
            text = text_of(message.content)
            words = len(text.split())
            unit = "word" if words == 1 else "words"
            reply = f'Offline reply: you said "{_excerpt(text)}" ({words} {unit}).'
            images = image_count(message.content)
            if images:
                reply += f" I cannot see the {images} attached image(s) offline."
            return reply
    return "Offline responder ready: send a message to begin."


def _reasoning_note(reasoning: str | None) -> str | None:
    """Return a fixed reasoning note when the caller asked for a reasoning effort."""
    if reasoning is None:
        return None
    return f"offline responder at reasoning effort {reasoning}: answered from the last message"


def _summary_item(message: ChatMessage) -> str:
    """Return the summary line for one message, or "" when it adds nothing."""
    text = text_of(message.content).strip()
    if message.role == "user" and text:
        return "- user: " + _excerpt(_first_sentence(text), _ITEM_CHARS)
    if message.role == "assistant":
        if text:
            first_line = next(line for line in text.splitlines() if line.strip())
            return "- assistant: " + _excerpt(first_line.strip(), _ITEM_CHARS)
        if message.tool_calls:
            names = ", ".join(call.name for call in message.tool_calls)
            return f"- assistant called: {names}"
    return ""


def _first_sentence(text: str) -> str:
    """Return the first sentence (or first line) of non-empty ``text``."""
    return next(part for part in _SENTENCE_END.split(text) if part.strip()).strip()


def _excerpt(text: str, limit: int = _EXCERPT_CHARS) -> str:
    """Return ``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _message_text(message: ChatMessage) -> str:
    """Return everything countable in a message: text, tool names and arguments."""
    calls = " ".join(f"{call.name} {call.arguments}" for call in message.tool_calls)
    return f"{text_of(message.content)} {calls}".strip()


def _estimate_tokens(texts: list[str]) -> int:
    """Estimate tokens as one per four characters, rounded up, per text."""
    return sum((len(text) + 3) // 4 for text in texts)
