"""Events that curate a session without touching its transcript: title, archive, pin, hide."""

from __future__ import annotations

from typing import ClassVar

from hermes_es.events.base import Event, register

TITLE_KINDS = ("user", "derived", "lineage")
ARCHIVE_REASONS = ("user", "sweep")


@register
class TitleSet(Event, frozen=True, kw_only=True):
    """The session's title was set or cleared (empty title)."""

    topic: ClassVar[str] = "hermes.session.title_set"
    title: str
    """New title; empty clears it."""
    kind: str = "user"
    """user | derived | lineage (a ``#N`` continuation title)."""


@register
class SessionArchived(Event, frozen=True, kw_only=True):
    """The session was hidden from pickers and lists."""

    topic: ClassVar[str] = "hermes.session.archived"
    reason: str = "user"
    """user (stays archived until unarchived) | sweep (comes back when live again)."""


@register
class SessionUnarchived(Event, frozen=True, kw_only=True):
    """The session is visible again."""

    topic: ClassVar[str] = "hermes.session.unarchived"
    reason: str = "user"
    """user | resumed | continued."""


@register
class SessionPinned(Event, frozen=True, kw_only=True):
    """The session is exempt from pruning and retention."""

    topic: ClassVar[str] = "hermes.session.pinned"


@register
class SessionUnpinned(Event, frozen=True, kw_only=True):
    """The session is no longer exempt from pruning."""

    topic: ClassVar[str] = "hermes.session.unpinned"


@register
class SessionHidden(Event, frozen=True, kw_only=True):
    """The session is hidden from pickers (e.g. an adopted Bot Mode chat)."""

    topic: ClassVar[str] = "hermes.session.hidden"
    hidden: bool = True
    """True hides, False shows again."""
