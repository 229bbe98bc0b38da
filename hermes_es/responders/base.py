"""The message shapes a responder reads and writes, and the ``Responder`` protocol."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import msgspec

ROLES = ("system", "user", "assistant", "tool")
"""Roles a chat message may carry."""


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool invocation requested by an assistant message."""

    id: str
    """Call id that the matching tool result answers."""
    name: str
    """Tool name."""
    arguments: str = "{}"
    """JSON-encoded arguments, as the model produced them."""
    type: str = "function"
    """The call type (chat-completions only defines ``function``), kept as given."""


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of the conversation window sent to, or produced by, a responder."""

    role: str
    """system | user | assistant | tool."""
    content: str | list[dict[str, Any]] = ""
    """Plain text, or OpenAI-style content parts (``{"type": "text", "text": ...}``, images)."""
    tool_calls: list[ToolCall] = []
    """Tool calls requested by an assistant message."""
    tool_call_id: str | None = None
    """For a tool result: the call it answers."""
    name: str | None = None
    """For a tool result: the tool that produced it."""
    reasoning: str | None = None
    """Model reasoning text, when the provider returned it."""
    finish_reason: str | None = None
    """Provider finish reason (``stop``, ``tool_calls``, ``length``), when known."""


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens billed for one call to the model."""

    prompt_tokens: int = 0
    """Tokens of the prompt (system prompt + window)."""
    completion_tokens: int = 0
    """Tokens the model produced."""


class TurnResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one turn produced: assistant and tool messages in order, to be stored atomically."""

    messages: list[ChatMessage]
    """Assistant tool calls, tool results and the reply, in the order they happened."""
    usage: Usage = Usage()
    """Tokens billed for the turn."""
    model: str = ""
    """Model that answered, as reported by the provider when it says."""
    interrupted: bool = False
    """The caller's cancel stopped the answer part-way: ``messages`` hold what arrived."""


OnDelta = Callable[[str], None]
"""Called with each piece of reply text as it arrives (streaming responders)."""


class Responder(Protocol):
    """The model behind a chat turn; implementations are chosen by ``make_responder``."""

    @property
    def name(self) -> str:
        """Short identifier of the responder kind (``offline``, ``openai``)."""
        ...

    @property
    def can_see_images(self) -> bool:
        """Whether image content parts may be sent as they are."""
        ...

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
        """Answer the conversation window ``messages`` under ``system_prompt``.

        The answer is one model call: an assistant message with text and/or tool calls (the
        chat runs the tools and calls again). ``tools`` is the request's ``tools`` array;
        ``on_delta`` receives reply text as it arrives; a set ``cancel`` stops the answer
        part-way and returns what arrived with ``interrupted`` set.
        """
        ...

    def summarize(self, messages: list[ChatMessage]) -> str:
        """Return a compaction summary of ``messages``."""
        ...


def text_of(content: str | list[dict[str, Any]]) -> str:
    """Return the plain text of message content, joining the text parts of a part list."""
    if isinstance(content, str):
        return content
    texts = [part["text"] for part in content if isinstance(part.get("text"), str)]
    return "\n".join(texts)


def image_count(content: str | list[dict[str, Any]]) -> int:
    """Return how many image parts a message content holds."""
    if isinstance(content, str):
        return 0
    return sum(1 for part in content if str(part.get("type", "")).startswith("image"))
