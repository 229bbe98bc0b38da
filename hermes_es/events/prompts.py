"""Events about the stored system prompt a session sends on every turn."""

from __future__ import annotations

from typing import ClassVar

from hermes_es.events.base import Event, register


@register
class PromptStored(Event, frozen=True, kw_only=True):
    """A system prompt text, stored once on the ``prompt:<sha256>`` stream."""

    topic: ClassVar[str] = "hermes.prompt.stored"
    sha256: str
    """Hex SHA-256 of the UTF-8 text: the content address sessions refer to."""
    text: str
    """The exact prompt bytes, as text."""


@register
class PromptRefreshRequested(Event, frozen=True, kw_only=True):
    """The next turn must rebuild the system prompt from the profile's current sources."""

    topic: ClassVar[str] = "hermes.prompt.refresh_requested"


@register
class SystemPromptRebuilt(Event, frozen=True, kw_only=True):
    """The stored prompt was replaced (first turn, refresh, or after a clear)."""

    topic: ClassVar[str] = "hermes.prompt.rebuilt"
    prompt_hash: str
    """SHA-256 of the new stored prompt."""
    reason: str = "refresh"
    """first_turn | refresh | repair."""


@register
class StoredPromptCleared(Event, frozen=True, kw_only=True):
    """The stored prompt was dropped (repair); the next turn rebuilds it."""

    topic: ClassVar[str] = "hermes.prompt.cleared"
    reason: str = "repair"
    """Why it was cleared."""


@register
class ToolsPinned(Event, frozen=True, kw_only=True):
    """The session's tools pin was (re)recorded, e.g. when a resume re-pins the tool surface."""

    topic: ClassVar[str] = "hermes.prompt.tools_pinned"
    tools: list[str]
    """Tool names."""
