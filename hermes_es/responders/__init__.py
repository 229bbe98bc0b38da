"""Pluggable model responders: the offline built-in one and any OpenAI-compatible endpoint."""

from __future__ import annotations

from hermes_es.responders.base import ChatMessage, Responder, ToolCall, TurnResult, Usage
from hermes_es.responders.factory import make_responder
from hermes_es.responders.offline import OfflineResponder
from hermes_es.responders.openai_compat import OpenAICompatResponder

__all__ = [
    "ChatMessage",
    "OfflineResponder",
    "OpenAICompatResponder",
    "Responder",
    "ToolCall",
    "TurnResult",
    "Usage",
    "make_responder",
]
