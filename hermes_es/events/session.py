"""Events of a session's life: start, lineage, end and reopen, workspace, deletion receipt."""

from __future__ import annotations

from typing import Any, ClassVar

from hermes_es.events.base import Event, register

PARENT_KINDS = ("compression", "branch", "delegate", "reset")


@register
class SessionStarted(Event, frozen=True, kw_only=True):
    """A session was created; everything a list, picker or resume needs up front."""

    topic: ClassVar[str] = "hermes.session.started"
    session_id: str
    """The human session id (``YYYYMMDD_HHMMSS_<hex>``), also the stream id."""
    source: str
    """Source tag: cli, tui, oneshot, tool, kanban, telegram, …"""
    user_id: str = ""
    """Owner identity recorded at creation."""
    platform: str = ""
    """Messaging platform, for gateway sessions."""
    chat_id: str = ""
    """Platform chat/thread id, for gateway sessions."""
    profile: str = "default"
    """Profile the session belongs to."""
    model: str = ""
    """Model name."""
    model_config: dict[str, Any] = {}
    """Provider/model settings the session keeps across resumes."""
    launch_flags: dict[str, Any] = {}
    """Command-line flags the session was launched with."""
    prompt_hash: str = ""
    """SHA-256 of the stored system prompt snapshot (a prompt stream holds the text)."""
    tools: list[str] | None = None
    """Tools pin: the tool names the stored prompt was built for; None when unknown."""
    cwd: str = ""
    """Working directory at start."""
    workspace_key: str = ""
    """Git repo root, else cwd."""
    parent_id: str = ""
    """Parent session, when this one continues, branches, delegates or resets another."""
    parent_kind: str = ""
    """compression | branch | delegate | reset (empty without a parent)."""
    title: str = ""
    """Initial title (``/new NAME``), empty when none."""
    imported_from: str = ""
    """Origin of an imported session (backup file or migrated store)."""
    create_id: str = ""
    """The client's create id (``session.create``'s ``create_id``), empty when none: its
    claim lives on the ``gateway:create:<create_id>`` stream."""


@register
class SessionContinued(Event, frozen=True, kw_only=True):
    """Compression split this session: the conversation continues in a child session."""

    topic: ClassVar[str] = "hermes.session.continued"
    child_id: str
    """The continuation child."""


@register
class SessionEnded(Event, frozen=True, kw_only=True):
    """The session was closed."""

    topic: ClassVar[str] = "hermes.session.ended"
    reason: str
    """user_exit, compression, oneshot_done, ws_orphan_reap, startup_orphan_reap, reset, …"""


@register
class SessionReopened(Event, frozen=True, kw_only=True):
    """An ended session became live again (resumed, or a new message arrived)."""

    topic: ClassVar[str] = "hermes.session.reopened"


@register
class SessionResumed(Event, frozen=True, kw_only=True):
    """A client resumed the session and picked up the profile's current config."""

    topic: ClassVar[str] = "hermes.session.resumed"
    config: dict[str, Any] = {}
    """The config parts picked up (toolsets, MCP servers, terminal, max_turns, …)."""


@register
class WorkspaceChanged(Event, frozen=True, kw_only=True):
    """The session's working directory (and so its workspace key) changed."""

    topic: ClassVar[str] = "hermes.session.workspace_changed"
    cwd: str
    """New working directory."""
    workspace_key: str
    """New workspace key (git repo root, else cwd)."""


@register
class ReasoningChanged(Event, frozen=True, kw_only=True):
    """``/reasoning LEVEL``: the session's reasoning effort, kept across resumes."""

    topic: ClassVar[str] = "hermes.session.reasoning_changed"
    level: str
    """none | low | medium | high."""


@register
class SessionCreateClaimed(Event, frozen=True, kw_only=True):
    """A ``session.create`` with a client's create id made a session (on the
    ``gateway:create:<create_id>`` stream, not a session's): the same id again answers with
    that session instead of making another."""

    topic: ClassVar[str] = "hermes.gateway.create_claimed"
    create_id: str
    """The client's create id."""
    session_id: str
    """The session it made."""


@register
class SessionDeleted(Event, frozen=True, kw_only=True):
    """Content-free receipt of a physical delete, on the ``receipt:<id>`` stream."""

    topic: ClassVar[str] = "hermes.session.deleted"
    session_id: str
    """The deleted session."""
    events: int
    """How many events were removed."""
    messages: int
    """How many messages were removed."""
    digest: str
    """SHA-256 over the deleted display transcript, to match against an export."""
    reason: str = ""
    """delete, prune, export-verified, …"""
