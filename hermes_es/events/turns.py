"""Events of a turn's life under a gateway: epoch, admitted, started, finished, unknown, resolved.

A turn is numbered per session (1, 2, …) by its admission. The gateway admits a submitted prompt
(keyed by the client's submission id, so a retry is admitted once), queues it first-in
first-out, starts it in its current epoch and records how it finished. A turn started in an
older epoch and never finished is recorded as unknown at the next start: the model call or its
tools may have run, so it is never replayed; a person resolves it.
"""

from __future__ import annotations

from typing import ClassVar

from hermes_es.events.base import Event, register

TURN_OUTCOMES = ("completed", "failed", "cancelled")
"""How a turn can finish."""

RESOLUTIONS = ("discard",)
"""How an unknown turn can be resolved."""


@register
class GatewayEpochBegan(Event, frozen=True, kw_only=True):
    """A gateway started for a profile: a new epoch (on the ``gateway:<profile>`` stream)."""

    topic: ClassVar[str] = "hermes.gateway.epoch_began"
    epoch: int
    """The epoch number (the stream version: 1, 2, …)."""
    instance_id: str
    """The gateway instance (also published in gateway.json)."""
    pid: int = 0
    """Process id of the gateway."""


@register
class TurnAdmitted(Event, frozen=True, kw_only=True):
    """A submitted prompt was admitted to the session's queue."""

    topic: ClassVar[str] = "hermes.turn.admitted"
    turn: int
    """The turn number within the session (1, 2, …)."""
    submission_id: str
    """The client's submission id: the same id twice is admitted once."""
    client_kind: str
    """The kind of client that submitted it: cli, tui, dashboard, platform, worker, …"""
    text: str
    """The prompt text to send when the turn runs."""


@register
class TurnStarted(Event, frozen=True, kw_only=True):
    """The gateway started running a turn."""

    topic: ClassVar[str] = "hermes.turn.started"
    turn: int
    """The turn number."""
    epoch: int
    """The gateway epoch that runs it."""


@register
class TurnFinished(Event, frozen=True, kw_only=True):
    """A turn finished: completed, failed (the error is kept) or cancelled before it started."""

    topic: ClassVar[str] = "hermes.turn.finished"
    turn: int
    """The turn number."""
    outcome: str
    """completed | failed | cancelled."""
    error: str = ""
    """What went wrong, for a failed turn."""
    seqs: list[int] = []
    """Sequence numbers of the messages the turn stored."""


@register
class TurnUnknown(Event, frozen=True, kw_only=True):
    """A turn started in an older epoch never finished: its outcome is unknown."""

    topic: ClassVar[str] = "hermes.turn.unknown"
    turn: int
    """The turn number."""
    epoch: int
    """The epoch that started it."""
    detected_epoch: int
    """The epoch whose start-up recovery found it."""


@register
class TurnResolved(Event, frozen=True, kw_only=True):
    """Someone resolved an unknown turn; queued followers may run again."""

    topic: ClassVar[str] = "hermes.turn.resolved"
    turn: int
    """The turn number."""
    resolution: str
    """discard (nothing more is done about it)."""
