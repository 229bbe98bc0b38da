"""The built-in offline responder: deterministic, no network, no key.

It echoes the last user message, calls tools when asked (``/tool <name> <args>`` or
``run: <name> <args>`` on a line of their own: one call per line, arguments ``{"text": args}``;
the chat runs them from the tool registry and calls again, and the reply then reports the
results), and summarises extractively. The same input always gives the same output: no
randomness, no clock.
"""

from __future__ import annotations

import hashlib
import operator
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import msgspec

from hermes_es.responders.base import (
    ChatMessage,
    OnDelta,
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
_COUNTED = 256
"""Windows whose token estimate the responder keeps (about one per live chat)."""


class OfflineResponder:
    """Deterministic responder used by default, by ``make demo`` and by tests."""

    def __init__(self, *, summary_chars: int = 2000) -> None:
        """Create the responder; summaries are capped at ``summary_chars`` characters."""
        self.summary_chars = summary_chars
        self._counted: OrderedDict[int, tuple[list[ChatMessage], int]] = OrderedDict()
        """id of a window's first message → (the window last counted, its tokens)."""
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """Responder kind: ``offline``."""
        return "offline"

    @property
    def can_see_images(self) -> bool:
        """The offline responder never looks at images."""
        return False

    def answers_inline(self, text: str) -> bool:
        """True when answering the prompt ``text`` does no I/O (no tool trigger line, so no
        tool runs): a server may then run the turn on its event loop instead of a thread.
        Responders without this method (an HTTP endpoint) are always run on a thread."""
        return _TRIGGER.search(text) is None

    def respond(
        self,
        system_prompt: str,
        messages: list[ChatMessage],
        *,
        model: str,
        reasoning: str | None = None,
        tools: Sequence[dict[str, Any]] = (),
        on_delta: OnDelta | None = None,
        cancel: threading.Event | None = None,
    ) -> TurnResult:
        """One model call: ask for the tools a trigger line names, or answer.

        A pending user message with trigger lines gets an assistant message calling those
        tools (the chat runs them and calls again); a window ending in tool results gets a
        reply reporting them; anything else gets the echo reply.
        """
        pending = _pending_user_text(messages)
        calls = (  # the call ids' prefix hashes the whole input: only when there are calls
            _tool_calls(pending, _call_id_prefix(system_prompt, messages))
            if pending is not None and _TRIGGER.search(pending)
            else []
        )
        produced: ChatMessage
        if calls:
            produced = ChatMessage(role="assistant", tool_calls=calls, finish_reason="tool_calls")
        else:
            results = _trailing_results(messages)
            reply = _tool_reply(results) if results else _echo_reply(messages)
            if on_delta is not None:
                on_delta(reply)
            produced = ChatMessage(
                role="assistant",
                content=reply,
                reasoning=_reasoning_note(reasoning),
                finish_reason="stop",
            )
        usage = Usage(
            prompt_tokens=_estimate_tokens([system_prompt]) + self._window_tokens(messages),
            completion_tokens=_estimate_tokens([_message_text(produced)]),
        )
        return TurnResult(messages=[produced], usage=usage, model=model or OFFLINE_MODEL)

    def _window_tokens(self, messages: list[ChatMessage]) -> int:
        """The token estimate of ``messages``: a chat sends the same message objects again
        each turn with the new ones after them, so only what follows the window counted
        last time (the same objects, in order) is counted."""
        if not messages:
            return 0
        key = id(messages[0])
        with self._lock:
            last = self._counted.get(key)
        known, tokens = last if last is not None else ([], 0)
        if not (known and len(known) <= len(messages) and all(map(operator.is_, known, messages))):
            known, tokens = [], 0
        tokens += _estimate_tokens([_message_text(m) for m in messages[len(known) :]])
        with self._lock:
            self._counted[key] = (list(messages), tokens)
            self._counted.move_to_end(key)
            while len(self._counted) > _COUNTED:
                self._counted.popitem(last=False)
        return tokens

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


def _trailing_results(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The tool results at the end of the window (the answers to the last tool calls)."""
    results: list[ChatMessage] = []
    for message in reversed(messages):
        if message.role != "tool":
            break
        results.insert(0, message)
    return results


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
