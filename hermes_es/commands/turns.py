"""Turn admission use cases: epochs, admit, start, finish, cancel, recover, resolve.

Each function is one use case on one session (one transaction, or one savepoint of a group
commit when the gateway's writer runs it). The decisions are ``aggregates.turns``'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hermes_es import events as ev
from hermes_es.aggregates import turns as agg
from hermes_es.aggregates.state import SessionState
from hermes_es.aggregates.validation import check_message_size, message_bytes
from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import InvariantError
from hermes_es.queries.turns import sessions_with_turns

EPOCH_STREAM_PREFIX = "gateway:"
"""Epochs of a profile's gateway live on the ``gateway:<profile>`` stream."""


class Admission(msgspec.Struct, frozen=True, kw_only=True):
    """What admitting a submission did."""

    session_id: str
    turn: int
    """The turn number it was admitted as."""
    duplicate: bool
    """True when this submission id had been admitted before (nothing new was stored)."""
    version: int
    """The session's stream version after the admission."""
    queued: list[int]
    """The session's queue after the admission."""


def begin_epoch(engine: SessionEngine, profile: str, *, instance_id: str, pid: int) -> int:
    """Record a new gateway epoch for ``profile``; returns its number."""
    stream = f"{EPOCH_STREAM_PREFIX}{profile}"
    with engine.store.transaction() as batch:
        epoch = batch.version_of(stream) + 1
        batch.record_other(
            stream,
            [
                ev.GatewayEpochBegan(
                    at=batch.now, actor=engine.actor, epoch=epoch, instance_id=instance_id, pid=pid
                )
            ],
        )
    return epoch


def admit(
    engine: SessionEngine, session_id: str, *, submission_id: str, client_kind: str, text: str
) -> Admission:
    """Admit a prompt to a session's queue (idempotent by submission id)."""
    return admit_with_head(
        engine, session_id, submission_id=submission_id, client_kind=client_kind, text=text
    )[0]


def admit_with_head(
    engine: SessionEngine, session_id: str, *, submission_id: str, client_kind: str, text: str
) -> tuple[Admission, SessionState]:
    """``admit``, and the session's head as the admission left it (what a caller that
    runs the queue next would otherwise read back)."""
    with engine.store.transaction() as batch:
        state = engine._existing(batch, session_id)
        batch.load_submissions(state)
        events = agg.admit(
            state,
            submission_id=submission_id,
            client_kind=client_kind,
            text=text,
            at=batch.now,
            actor=engine.actor,
        )
        if not events:  # admitted before
            return Admission(
                session_id=session_id,
                turn=agg.admitted_turn(state, submission_id),
                duplicate=True,
                version=state.version,
                queued=list(state.turn_queue),
            ), state
        # Refused at admission, not when the turn runs: the submitter hears it at once and
        # nothing is queued.
        check_message_size(message_bytes(text, None, ""), engine.max_message_bytes, "the prompt")
        state = batch.record(session_id, events)
        return Admission(
            session_id=session_id,
            turn=state.turns_admitted,
            duplicate=False,
            version=state.version,
            queued=list(state.turn_queue),
        ), state


class EpochEndedError(InvariantError):
    """A newer epoch of the profile began: the gateway of the older one no longer owns it."""


def check_epoch(batch: Any, epoch: int, fence: str) -> None:
    """Refuse (EpochEndedError) when ``fence`` names a profile whose current epoch is no
    longer ``epoch``; nothing to check for an empty ``fence``."""
    if not fence:
        return
    current = batch.version_of(f"{EPOCH_STREAM_PREFIX}{fence}")
    if current != epoch:
        raise EpochEndedError(
            f"epoch {epoch} of profile {fence} has ended (epoch {current} began):"
            " another gateway owns it",
            subject=fence,
        )


def start_next(engine: SessionEngine, session_id: str, *, epoch: int, fence: str = "") -> int:
    """Start the session's next runnable turn, if any; returns its number (0: none).

    ``fence``: the profile whose current epoch must still be ``epoch`` (a team gateway: once
    another gateway has begun a newer epoch, this one may start nothing more).
    """
    with engine.store.transaction() as batch:
        check_epoch(batch, epoch, fence)
        state = engine._existing(batch, session_id)
        turn = agg.next_runnable(state)
        if not turn:
            return 0
        batch.record(
            session_id, agg.start(state, turn, epoch=epoch, at=batch.now, actor=engine.actor)
        )
        return turn


def finish(
    engine: SessionEngine,
    session_id: str,
    turn: int,
    *,
    outcome: str,
    error: str = "",
    seqs: Sequence[int] = (),
) -> SessionState:
    """Record how the running turn finished."""
    with engine.store.transaction() as batch:
        state = engine._existing(batch, session_id)
        events = agg.finish(
            state,
            turn,
            outcome=outcome,
            error=error,
            seqs=list(seqs),
            at=batch.now,
            actor=engine.actor,
        )
        return batch.record(session_id, events)


def cancel(engine: SessionEngine, session_id: str, turn: int) -> SessionState:
    """Cancel a queued turn."""
    with engine.store.transaction() as batch:
        state = engine._existing(batch, session_id)
        return batch.record(session_id, agg.cancel(state, turn, at=batch.now, actor=engine.actor))


def resolve(
    engine: SessionEngine, session_id: str, turn: int = 0, *, resolution: str = "discard"
) -> int:
    """Resolve an unknown turn (0: the oldest); returns the turn resolved."""
    with engine.store.transaction() as batch:
        state = engine._existing(batch, session_id)
        events = agg.resolve(state, turn, resolution=resolution, at=batch.now, actor=engine.actor)
        batch.record(session_id, events)
        resolved = events[0]
        assert isinstance(resolved, ev.TurnResolved)
        return resolved.turn


def recover(engine: SessionEngine, *, epoch: int) -> list[tuple[str, int]]:
    """Record every turn an older epoch started and never finished as unknown.

    Returns ``(session_id, turn)`` for each turn marked. Never replays anything.
    """
    marked: list[tuple[str, int]] = []
    with engine.store.transaction() as batch:
        for session_id in sessions_with_turns(batch.conn, running=True):
            state = batch.load(session_id)
            events = agg.mark_unknown(state, epoch=epoch, at=batch.now, actor=engine.actor)
            if events:
                batch.record(session_id, events)
                marked.append((session_id, state.turns_unknown[-1]))
    return marked
