"""What a running turn reports while it runs: reply text as it streams, tool calls, tool results.

``Chat.send(text, on_event=...)`` calls ``on_event`` from the thread running the turn, in the
order things happen: for each model call, zero or more ``ReplyDelta`` pieces of its text, then,
when it called tools, one ``ToolCallStarted`` per call followed by that call's
``ToolResultReady``; then the next model call. A turn whose model never streams (the offline
responder, ``model.stream: false``) reports its reply as a single ``ReplyDelta``.

These are not stored events: what is stored is the complete turn, recorded atomically once the
turn is over. A renderer (the terminal, the gateway's websocket) only draws them. Each is a
frozen msgspec Struct tagged for JSON (``{"type": "reply.delta", "text": ...}``), so a server can
forward them as they are with ``msgspec.json.encode``.

This module follows the contract agreed with the gateway; nothing here deviates from it.
"""

from __future__ import annotations

import msgspec


class ReplyDelta(msgspec.Struct, frozen=True, kw_only=True, tag="reply.delta"):
    """A piece of the assistant's reply text, in arrival order."""

    text: str
    """The new text (append it to what came before)."""


class ToolCallStarted(msgspec.Struct, frozen=True, kw_only=True, tag="tool.call"):
    """The model called a tool; the chat is about to run it."""

    call_id: str
    """The call id its result answers."""
    name: str
    """Tool name, as the model wrote it (possibly unknown to the registry)."""
    arguments: str
    """JSON-encoded arguments, as the model produced them."""


class ToolResultReady(msgspec.Struct, frozen=True, kw_only=True, tag="tool.result"):
    """A tool call finished (or was refused); its result is what the model sees next."""

    call_id: str
    """The call this result answers."""
    name: str
    """Tool name."""
    content: str
    """The result text sent back to the model."""
    is_error: bool = False
    """True when the tool is unknown, its arguments were invalid, or it failed."""


TurnEvent = ReplyDelta | ToolCallStarted | ToolResultReady
"""Anything ``on_event`` may receive."""

__all__ = ["ReplyDelta", "ToolCallStarted", "ToolResultReady", "TurnEvent"]
