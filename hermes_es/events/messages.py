"""Events that add, change or hide conversation messages."""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from hermes_es.events.base import Event, register

ROLES = ("system", "user", "assistant", "tool")


class ToolCall(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool invocation requested by an assistant message."""

    id: str
    """Call id the tool result answers."""
    name: str
    """Tool name."""
    arguments: str = "{}"
    """JSON-encoded arguments, as the model produced them."""
    type: str = "function"
    """The chat-completions call type (``function``), kept as given."""


class Media(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An attachment, kept as derived text or a local path, never as bytes."""

    kind: str
    """document | image | audio | other."""
    path: str
    """Local path the attachment was read from."""
    text: str | None = None
    """Extracted text, description or transcript, when one was made."""
    note: str = ""
    """Short human note (size, dimensions, why only the path was kept)."""


class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One stored message; ``seq`` is its per-session sequence number."""

    seq: int
    """Per-session sequence number, assigned by the aggregate, never reused."""
    uid: str
    """Client-side unique id; appending the same uid twice stores it once."""
    role: str
    """system | user | assistant | tool."""
    content: str | list[dict[str, Any]] = ""
    """Plain text, or structured content parts."""
    tool_calls: list[ToolCall] = []
    """Tool calls requested by an assistant message."""
    tool_call_id: str | None = None
    """For a tool result: the call it answers."""
    tool_name: str | None = None
    """For a tool result: the tool that produced it."""
    reasoning: str | None = None
    """Model reasoning text, when the provider returned it."""
    tokens_in: int = 0
    """Prompt tokens billed for the turn that produced this message."""
    tokens_out: int = 0
    """Completion tokens of this message."""
    media: list[Media] = []
    """Attachments handled once for this message."""
    finish_reason: str | None = None
    """Provider finish reason, when known."""
    at: float = 0.0
    """When the message was created."""
    reasoning_content: str | None = None
    """Provider ``reasoning_content`` text, kept beside ``reasoning`` when both were given."""
    token_count: int | None = None
    """The message's own token count, when the source recorded one (migrated Hermes rows)."""


@register
class MessageAppended(Event, frozen=True, kw_only=True):
    """One message was appended to the active conversation."""

    topic: ClassVar[str] = "hermes.message.appended"
    message: Message
    """The stored message."""


@register
class TurnAppended(Event, frozen=True, kw_only=True):
    """A whole turn (tool calls, tool results, reply) was appended atomically."""

    topic: ClassVar[str] = "hermes.turn.appended"
    messages: list[Message]
    """The turn's messages, in order."""


@register
class TokenUsageRecorded(Event, frozen=True, kw_only=True):
    """Token usage billed outside any stored message (e.g. a failed or summarising call)."""

    topic: ClassVar[str] = "hermes.usage.recorded"
    tokens_in: int = 0
    """Prompt tokens."""
    tokens_out: int = 0
    """Completion tokens."""
    model: str = ""
    """Model that billed them."""
    cache_read_tokens: int = 0
    """Prompt-cache read tokens."""
    cache_write_tokens: int = 0
    """Prompt-cache write tokens."""
    reasoning_tokens: int = 0
    """Reasoning tokens."""
    api_calls: int = 0
    """Model API calls made."""
    estimated_cost_usd: float | None = None
    """Estimated cost in USD, when the source recorded one."""
    actual_cost_usd: float | None = None
    """Billed cost in USD, when the provider reported one."""


@register
class RewoundTo(Event, frozen=True, kw_only=True):
    """Every active message after ``seq`` was removed from the conversation (kept, inactive)."""

    topic: ClassVar[str] = "hermes.message.rewound"
    seq: int
    """The last message that stays active."""
    removed: list[int]
    """Sequence numbers that became inactive."""


@register
class MessageEdited(Event, frozen=True, kw_only=True):
    """A message was replaced; the old row stays, inactive, and the new one takes its place."""

    topic: ClassVar[str] = "hermes.message.edited"
    target_seq: int
    """The message that was replaced."""
    message: Message
    """The replacement, with a new sequence number."""


@register
class CompactedInPlace(Event, frozen=True, kw_only=True):
    """Older messages were archived from the model context and replaced by summary messages."""

    topic: ClassVar[str] = "hermes.session.compacted"
    archived: list[int]
    """Sequence numbers archived by the compaction (still shown in display exports)."""
    summary: list[Message]
    """Summary messages placed where the archived ones were."""


@register
class HistoryImported(Event, frozen=True, kw_only=True):
    """Rows restored from a backup or a migrated store, as archived history."""

    topic: ClassVar[str] = "hermes.history.imported"
    messages: list[Message]
    """Restored messages, in their original order."""
    states: list[str]
    """Per message: the state it had in the source (active, compacted, rewound, edited)."""
    origin: str = ""
    """Where the rows came from (file path or ``hermes-db:<path>``)."""
    live: bool = False
    """The rows continue as the session's own conversation (a migrated Hermes store): its
    ``active`` rows are live model context, like appended messages. False (a backup): every
    row is archived history, shown and searchable, never context."""
