"""Turn decisions under a gateway: admit, start, finish, cancel, mark unknown, resolve.

Pure functions over the thin session state, like ``aggregates.session``: no I/O, no clock.
The queue is first in first out per session; a session with an unknown turn runs nothing
until it is resolved (its followers wait), and a running turn blocks the next one.
"""

from __future__ import annotations

from hermes_es import events as ev
from hermes_es.aggregates.session import _require_live, _revive
from hermes_es.aggregates.state import SessionState
from hermes_es.errors import InvariantError, ValidationError

MAX_SUBMISSION_ID = 128
"""Longest accepted client submission id."""

MAX_QUEUED_TURNS = 100
"""Most turns a session holds waiting to start: a client that submits faster than the turns
run is refused at admission (nothing stored) instead of growing the queue without end."""


def admitted_turn(state: SessionState, submission_id: str) -> int:
    """The turn a submission id was already admitted as, or 0."""
    return state.recent_submissions.get(submission_id, 0)


def admit(
    state: SessionState,
    *,
    submission_id: str,
    client_kind: str,
    text: str,
    at: float,
    actor: str = "",
) -> list[ev.Event]:
    """Decide admitting a prompt (nothing when this submission id was already admitted)."""
    _require_live(state)
    if not submission_id or len(submission_id) > MAX_SUBMISSION_ID:
        raise ValidationError(
            f"submission_id must be 1 to {MAX_SUBMISSION_ID} characters, got {len(submission_id)}",
            subject="submission_id",
        )
    if admitted_turn(state, submission_id):
        return []
    if not text.strip():
        raise ValidationError("empty message: nothing to submit", subject="text")
    if not client_kind:
        raise ValidationError("a submission needs a client kind", subject="client_kind")
    if len(state.turn_queue) >= MAX_QUEUED_TURNS:
        raise InvariantError(
            f"session {state.session_id} already has {len(state.turn_queue)} turns waiting"
            f" (at most {MAX_QUEUED_TURNS}): submit again once some have run, or cancel"
            " queued ones",
            subject=state.session_id,
        )
    return [
        *_revive(state, at, actor),
        ev.TurnAdmitted(
            at=at,
            actor=actor,
            turn=state.turns_admitted + 1,
            submission_id=submission_id,
            client_kind=client_kind,
            text=text,
        ),
    ]


def next_runnable(state: SessionState) -> int:
    """The turn that may start now, or 0 (none queued, one running, or one unknown)."""
    if state.turns_unknown or state.turn_running or not state.turn_queue:
        return 0
    return state.turn_queue[0]


def start(
    state: SessionState, turn: int, *, epoch: int, at: float, actor: str = ""
) -> list[ev.Event]:
    """Decide starting ``turn``: it must be first in the queue and nothing may block it."""
    _require_live(state)
    if state.turns_unknown:
        raise InvariantError(
            f"session {state.session_id} is paused on unknown turn {state.turns_unknown[0]};"
            " resolve it first",
            subject=state.session_id,
        )
    if next_runnable(state) != turn:
        raise InvariantError(
            f"turn {turn} of session {state.session_id} is not next in its queue",
            subject=str(turn),
        )
    return [ev.TurnStarted(at=at, actor=actor, turn=turn, epoch=epoch)]


def finish(
    state: SessionState,
    turn: int,
    *,
    outcome: str,
    error: str = "",
    seqs: list[int] | None = None,
    at: float,
    actor: str = "",
) -> list[ev.Event]:
    """Decide finishing the running ``turn`` (completed or failed)."""
    _require_live(state)
    if outcome not in ("completed", "failed"):
        raise ValidationError(f"invalid turn outcome {outcome!r}", subject=outcome)
    if state.turn_running != turn:
        raise InvariantError(
            f"turn {turn} of session {state.session_id} is not running", subject=str(turn)
        )
    return [
        ev.TurnFinished(
            at=at, actor=actor, turn=turn, outcome=outcome, error=error, seqs=list(seqs or [])
        )
    ]


def cancel(state: SessionState, turn: int, *, at: float, actor: str = "") -> list[ev.Event]:
    """Decide cancelling a queued turn (a started turn cannot be cancelled)."""
    _require_live(state)
    if turn not in state.turn_queue:
        what = "running" if turn == state.turn_running else "not queued"
        raise InvariantError(
            f"turn {turn} of session {state.session_id} is {what}: only queued turns can be"
            " cancelled",
            subject=str(turn),
        )
    return [ev.TurnFinished(at=at, actor=actor, turn=turn, outcome="cancelled")]


def mark_unknown(state: SessionState, *, epoch: int, at: float, actor: str = "") -> list[ev.Event]:
    """Decide recording the running turn as unknown when an older epoch started it."""
    if not state.turn_running or state.turn_epoch >= epoch:
        return []
    return [
        ev.TurnUnknown(
            at=at,
            actor=actor,
            turn=state.turn_running,
            epoch=state.turn_epoch,
            detected_epoch=epoch,
        )
    ]


def resolve(
    state: SessionState, turn: int, *, resolution: str, at: float, actor: str = ""
) -> list[ev.Event]:
    """Decide resolving an unknown turn (0: the oldest unknown one)."""
    _require_live(state)
    if resolution not in ev.RESOLUTIONS:
        raise ValidationError(
            f"invalid resolution {resolution!r}: expected one of {', '.join(ev.RESOLUTIONS)}",
            subject=resolution,
        )
    if not state.turns_unknown:
        raise InvariantError(
            f"session {state.session_id} has no unknown turn to resolve", subject=state.session_id
        )
    target = turn or state.turns_unknown[0]
    if target not in state.turns_unknown:
        raise InvariantError(
            f"turn {target} of session {state.session_id} is not unknown", subject=str(target)
        )
    return [ev.TurnResolved(at=at, actor=actor, turn=target, resolution=resolution)]
