"""A gateway turn as two use cases: ``begin`` (start it, store the user's message) and ``end``
(store what the responder produced, finish it).

The split turn runner of the gateway (``gateway.authority``) writes a turn with these two
instead of four (start, user message, reply, finish): each pair says one thing ("the turn
begins", "the turn ends") and commits together. What a crash leaves is unchanged or better:
before ``begin`` commits the turn is still queued (admission stays a use case of its own);
after it the turn is started and comes back ``unknown``; ``end`` stores the reply and the
finish atomically, so a turn is never left with its reply stored but unfinished.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hermes_es import events as ev
from hermes_es.aggregates import session as agg_session
from hermes_es.aggregates import turns as agg
from hermes_es.aggregates.state import SessionState
from hermes_es.commands.engine import SessionEngine, to_draft
from hermes_es.commands.turns import check_epoch
from hermes_es.errors import HermesError


class Begun(msgspec.Struct, frozen=True, kw_only=True):
    """What ``begin`` did."""

    turn: int
    """The turn started (0: nothing started: ``turn`` was not the next runnable one)."""
    seqs: list[int]
    """The sequence numbers of the stored user message(s) (empty when it failed)."""
    version: int
    """The session's stream version after the use case."""
    transcript_moved: bool
    """The transcript had changed since ``display_version`` (another writer): the caller's
    in-memory window is stale."""
    error: str = ""
    """The user's message was refused (the turn is then already finished ``failed``)."""


class Ended(msgspec.Struct, frozen=True, kw_only=True):
    """What ``end`` did."""

    outcome: str
    seqs: list[int]
    """The turn's sequence numbers: the user message then the stored reply messages."""
    version: int
    transcript_moved: bool
    """The transcript had changed since ``display_version`` before the reply was stored."""
    error: str = ""
    runnable: int = 0
    """The session's next runnable turn once this one finished (0: none may start now)."""
    head: SessionState | None = None
    """The session's head as this use case left it."""


def begin(
    engine: SessionEngine,
    session_id: str,
    turn: int,
    *,
    epoch: int,
    messages: Sequence[dict[str, Any]],
    actor: str,
    display_version: int,
    fence: str = "",
) -> Begun:
    """Start ``turn`` (the gateway's actor) and store the user's ``messages`` (as ``actor``, the
    submitter) in one use case. Nothing happens when ``turn`` is not the next runnable one.
    A message the session refuses finishes the turn ``failed`` in the same use case."""
    drafts = [to_draft(m) for m in messages]
    with engine.store.transaction() as batch:
        check_epoch(batch, epoch, fence)
        state = engine._existing(batch, session_id)
        moved = state.display_version > display_version
        if agg.next_runnable(state) != turn:
            return Begun(turn=0, seqs=[], version=state.version, transcript_moved=moved)
        state = batch.record(
            session_id, agg.start(state, turn, epoch=epoch, at=batch.now, actor=engine.actor)
        )
        before = state.next_seq
        try:
            events = agg_session.append(
                state, drafts, at=batch.now, actor=actor, max_bytes=engine.max_message_bytes
            )
        except HermesError as exc:
            batch.record(session_id, _failed(state, turn, exc.message, batch.now, engine.actor))
            return Begun(
                turn=turn,
                seqs=[],
                version=state.version,
                transcript_moved=moved,
                error=exc.message,
            )
        state = batch.record(session_id, events)
        return Begun(
            turn=turn,
            seqs=list(range(before, before + len(drafts))),
            version=state.version,
            transcript_moved=moved,
        )


def end(
    engine: SessionEngine,
    session_id: str,
    turn: int,
    *,
    messages: Sequence[dict[str, Any]],
    actor: str,
    user_seqs: Sequence[int],
    display_version: int,
    error: str = "",
) -> Ended:
    """Store the responder's ``messages`` (as ``actor``) and finish ``turn`` (the gateway's
    actor) in one use case: ``completed`` with every sequence number, or ``failed`` with
    ``error`` (given, or the session's refusal of the messages, then nothing is stored)."""
    drafts = [to_draft(m) for m in messages] if not error else []
    with engine.store.transaction() as batch:
        state = engine._existing(batch, session_id)
        moved = state.display_version > display_version
        seqs: list[int] = []
        if drafts and not error:
            before = state.next_seq
            try:
                events = agg_session.append(
                    state, drafts, at=batch.now, actor=actor, max_bytes=engine.max_message_bytes
                )
            except HermesError as exc:
                error = exc.message
            else:
                state = batch.record(session_id, events)
                seqs = list(range(before, before + len(drafts)))
        if error:
            state = batch.record(session_id, _failed(state, turn, error, batch.now, engine.actor))
            return Ended(
                outcome="failed",
                seqs=[],
                version=state.version,
                transcript_moved=moved,
                error=error,
                runnable=agg.next_runnable(state),
                head=state,
            )
        done = [*user_seqs, *seqs]
        state = batch.record(
            session_id,
            agg.finish(
                state, turn, outcome="completed", seqs=done, at=batch.now, actor=engine.actor
            ),
        )
        return Ended(
            outcome="completed",
            seqs=done,
            version=state.version,
            transcript_moved=moved,
            runnable=agg.next_runnable(state),
            head=state,
        )


def _failed(state: SessionState, turn: int, error: str, at: float, actor: str) -> list[ev.Event]:
    return agg.finish(state, turn, outcome="failed", error=error, at=at, actor=actor)
