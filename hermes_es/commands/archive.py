"""Archiving conversations as units, and the ``sessions.auto_archive`` idle sweep.

A conversation's archive state lives on its live tip (``archived`` is ``user`` or ``sweep``);
a user archive on any segment keeps the whole conversation archived, so compressing a chat the
user archived does not bring it back, while a sweep archive is undone by a resume (the engine
unarchives the tip) or by a compression continuation (the new tip starts unarchived).
Unarchiving clears every segment. A chat that is still active (not ended and active within
``ACTIVE_GRACE``, or open in a running hermes process) is never archived in bulk or swept,
however long or old its history.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

from hermes_es.aggregates import session as agg
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.holders import held_sessions
from hermes_es.commands.prune import DAY, UnitFilter, matches
from hermes_es.errors import ValidationError
from hermes_es.queries.units import Unit, chain_segments, load_units

ACTIVE_GRACE = DAY
"""A chat that has not ended and was active this recently counts as still in use."""


def is_active(
    unit: Unit,
    now: float,
    held: Collection[str] = (),
    grace: float = ACTIVE_GRACE,
) -> bool:
    """True for a chat still in use: open in a hermes process, or not ended and recent."""
    if any(m.id in held for m in unit.members):
        return True
    return not unit.tip.ended and unit.tip.last_active >= now - grace


def plan_archive(
    units: Iterable[Unit],
    f: UnitFilter,
    now: float,
    held: Collection[str] = (),
) -> list[Unit]:
    """Conversations a bulk archive hides: matching, not yet user-archived, not in use."""
    return [
        u
        for u in units
        if not u.delegate_of
        and u.archived != "user"
        and matches(u, f, now)
        and not is_active(u, now, held)
    ]


def plan_sweep(
    units: Iterable[Unit],
    idle_days: float,
    now: float,
    held: Collection[str] = (),
) -> list[Unit]:
    """Conversations the idle sweep hides: tip idle ``idle_days``, not archived, not pinned."""
    if idle_days <= 0:
        return []
    cutoff = now - idle_days * DAY
    return [
        u
        for u in units
        if not u.delegate_of
        and not u.archived
        and u.last_active < cutoff
        and not any(m.pinned for m in u.members)
        and not any(m.id in held for m in u.members)
    ]


def archive_units(engine: SessionEngine, units: Sequence[Unit], reason: str) -> list[str]:
    """Archive each conversation through its live tip, in one transaction; returns tip ids."""
    done: list[str] = []
    if not units:
        return done
    with engine.store.transaction() as batch:
        for unit in units:
            state = batch.load(unit.tip.id)
            if state.version == 0:
                continue
            events = agg.archive(state, reason, at=batch.now, actor=engine.actor)
            if events:
                batch.record(unit.tip.id, events)
                done.append(unit.tip.id)
    return done


def archive_matching(engine: SessionEngine, f: UnitFilter, now: float | None = None) -> list[str]:
    """Archive every matching conversation not in use (``hermes sessions archive --all``)."""
    at = time.time() if now is None else now
    units = load_units(engine.store.connection())
    return archive_units(engine, plan_archive(units, f, at, held_sessions(engine.db_path)), "user")


def sweep_idle(engine: SessionEngine, idle_days: float, now: float | None = None) -> list[str]:
    """Archive (reason ``sweep``) conversations idle for ``idle_days``; returns the tip ids."""
    if idle_days < 0:
        raise ValidationError(f"idle days must be >= 0, got {idle_days}")
    at = time.time() if now is None else now
    units = load_units(engine.store.connection())
    return archive_units(
        engine, plan_sweep(units, idle_days, at, held_sessions(engine.db_path)), "sweep"
    )


SWEEP_EVERY = 24 * 3600.0
"""The idle sweep that chats run on their way out happens at most once a day per profile."""


def maybe_sweep(
    engine: SessionEngine, marker: Path, idle_days: float, now: float | None = None
) -> list[str] | None:
    """Run the idle sweep if ``idle_days`` is set and ``marker`` is older than a day.

    Returns the archived tips, or None when the sweep was not due. The marker file's mtime
    records the last sweep, so concurrent chats rarely sweep twice (and a double sweep is
    harmless: archiving an archived chat decides no events).
    """
    if idle_days <= 0:
        return None
    at = time.time() if now is None else now
    try:
        if at - marker.stat().st_mtime < SWEEP_EVERY:
            return None
    except FileNotFoundError:
        pass
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    os.utime(marker, (at, at))
    return sweep_idle(engine, idle_days, at)


def _tip_of(engine: SessionEngine, ref: str) -> tuple[str, list[str]]:
    """The live tip of the conversation ``ref`` names, and every segment id."""
    sid = engine.resolve(ref)
    segments = chain_segments(engine.store.connection(), sid)
    known = {s.id for s in segments}
    live = [s for s in segments if not s.continued_into or s.continued_into not in known]
    tip = max(live, key=lambda s: (s.last_active, s.started_at, s.id)).id if live else sid
    return tip, [s.id for s in segments] or [sid]


def archive_sessions(engine: SessionEngine, refs: Sequence[str]) -> list[str]:
    """Archive the conversations named (id, prefix or title) through their tips, by the user."""
    tips = [_tip_of(engine, ref)[0] for ref in refs]
    done: list[str] = []
    with engine.store.transaction() as batch:
        for tip in dict.fromkeys(tips):
            events = agg.archive(batch.load(tip), "user", at=batch.now, actor=engine.actor)
            if events:
                batch.record(tip, events)
                done.append(tip)
    return done


def unarchive_sessions(engine: SessionEngine, refs: Sequence[str]) -> list[str]:
    """Unarchive the conversations named: every segment; returns the segment ids changed."""
    members = [sid for ref in refs for sid in _tip_of(engine, ref)[1]]
    done: list[str] = []
    with engine.store.transaction() as batch:
        for sid in dict.fromkeys(members):
            events = agg.unarchive(batch.load(sid), at=batch.now, actor=engine.actor)
            if events:
                batch.record(sid, events)
                done.append(sid)
    return done


def pin_sessions(engine: SessionEngine, refs: Sequence[str], pinned: bool) -> list[str]:
    """Pin the conversations named (through their tips), or unpin every segment of them."""
    targets: list[str] = []
    for ref in refs:
        tip, members = _tip_of(engine, ref)
        targets.extend([tip] if pinned else members)
    done: list[str] = []
    with engine.store.transaction() as batch:
        for sid in dict.fromkeys(targets):
            events = agg.pin(batch.load(sid), pinned, at=batch.now, actor=engine.actor)
            if events:
                batch.record(sid, events)
                done.append(sid)
    return done
