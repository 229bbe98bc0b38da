"""``hermes sessions prune``: which conversations go (pure rules) and deleting them.

Rules, per conversation (a compression chain with its delegate sessions, see queries/units):
the filters look at the live tip (age, time window, workspace) or the whole chain (title,
message count); a conversation is pruned only when every segment and every delegate has
ended, none is pinned and none is open in a running hermes process. So an older segment stays
while any later one does, and age counts from the tip.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

import msgspec

from hermes_es.commands.delete import (
    Deleted,
    delegate_tree,
    drop_unreferenced_prompts,
    scrub_wal,
)
from hermes_es.commands.delete import _remove as remove_stream
from hermes_es.commands.optimize import merge_fts
from hermes_es.commands.unit_of_work import Batch, Store
from hermes_es.errors import ValidationError
from hermes_es.projections.purge import indexed_messages, prefer_optimize, purging
from hermes_es.queries.units import Unit

DAY = 86400.0
MERGE_FIRST = 200
"""Prunes of at least this many sessions merge the full-text index before deleting."""
DEFAULT_AGE = 90 * DAY
"""``--older-than`` when no time filter is given."""

_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w|y)?\s*", re.IGNORECASE)
_UNIT_SECONDS = {
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": DAY,
    "w": 7 * DAY,
    "y": 365 * DAY,
}


def parse_age(text: str) -> float:
    """Seconds in an age like ``30d``, ``12h``, ``2w``, ``45m``, ``1y`` (a bare number is days)."""
    m = _AGE.fullmatch(text)
    if not m:
        raise ValidationError(
            f"invalid age {text!r}: use a number with s, m, h, d, w or y (e.g. 30d)", subject=text
        )
    unit = (m.group(2) or "d").lower()
    return float(m.group(1)) * _UNIT_SECONDS[unit]


def parse_time(text: str, now: float) -> float:
    """A point in time: ISO date/datetime (local time unless it says otherwise) or an age ago."""
    try:
        return now - parse_age(text)
    except ValidationError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValidationError(
            f"invalid time {text!r}: use YYYY-MM-DD, YYYY-MM-DDTHH:MM or an age like 30d",
            subject=text,
        ) from None
    return parsed.timestamp()


@dataclass(frozen=True)
class UnitFilter:
    """What a person asked for; every given criterion must hold."""

    older_than: float | None = None
    """Seconds since the tip was last active."""
    sources: tuple[str, ...] = ()
    title: str | None = None
    cwd: str | None = None
    min_messages: int | None = None
    max_messages: int | None = None
    before: float | None = None
    after: float | None = None

    def has_time(self) -> bool:
        """True when any age or time window was given."""
        return self.older_than is not None or self.before is not None or self.after is not None


def matches(unit: Unit, f: UnitFilter, now: float) -> bool:
    """True when the conversation meets every criterion of ``f`` (age from the tip)."""
    last = unit.last_active
    if f.older_than is not None and last >= now - f.older_than:
        return False
    if f.before is not None and last >= f.before:
        return False
    if f.after is not None and last < f.after:
        return False
    if f.sources and unit.tip.source not in f.sources:
        return False
    if f.title is not None:
        needle = f.title.casefold()
        if not any(needle in m.title.casefold() for m in unit.members):
            return False
    if f.cwd is not None:
        needle = f.cwd.rstrip("/") or f.cwd
        if not any(needle in s for s in (unit.tip.cwd, unit.tip.workspace)):
            return False
    if f.min_messages is not None and unit.messages < f.min_messages:
        return False
    return not (f.max_messages is not None and unit.messages > f.max_messages)


def keep_reason(unit: Unit, held: Collection[str] = ()) -> str | None:
    """Why a matching conversation must not be pruned, or None when it may go."""
    everyone = [*unit.members, *unit.delegates]
    if any(s.pinned for s in everyone):
        return "pinned"
    if not all(s.ended for s in unit.members):
        return "not ended"
    if not all(s.ended for s in unit.delegates):
        return "a delegate has not ended"
    if any(s.id in held for s in everyone):
        return "open in a running hermes process"
    return None


class Kept(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation that matched the filters but stays, and why."""

    tip_id: str
    reason: str


@dataclass
class PrunePlan:
    """The conversations a prune deletes and the matching ones it keeps."""

    selected: list[Unit] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)

    @property
    def session_ids(self) -> list[str]:
        """Every session to delete: each unit's segments, newest first (delegates cascade)."""
        return [sid for u in self.selected for sid in reversed(u.ids)]

    @property
    def sessions(self) -> int:
        """How many sessions go, delegates included."""
        return sum(len(u.members) + len(u.delegates) for u in self.selected)

    @property
    def messages(self) -> int:
        """How many messages go, delegates included."""
        return sum(u.messages + sum(d.messages for d in u.delegates) for u in self.selected)


def plan_prune(
    units: Iterable[Unit],
    f: UnitFilter,
    now: float,
    held: Collection[str] = (),
) -> PrunePlan:
    """Apply the prune rules: which matching conversations go, oldest first."""
    plan = PrunePlan()
    for unit in sorted(units, key=lambda u: (u.last_active, u.root_id)):
        if unit.delegate_of or not matches(unit, f, now):
            continue
        reason = keep_reason(unit, held)
        if reason is None:
            plan.selected.append(unit)
        else:
            plan.kept.append(Kept(tip_id=unit.tip.id, reason=reason))
    return plan


def _chunks(units: Sequence[Unit], size: int) -> Iterable[list[Unit]]:
    """Whole units per chunk, about ``size`` sessions each (a unit is never split)."""
    chunk: list[Unit] = []
    count = 0
    for unit in units:
        chunk.append(unit)
        count += len(unit.members) + len(unit.delegates)
        if count >= size:
            yield chunk
            chunk, count = [], 0
    if chunk:
        yield chunk


def _still_prunable(batch: Batch, unit: Unit) -> bool:
    """Re-check inside the delete transaction: every session ended and unpinned."""
    for seg in [*unit.members, *unit.delegates]:
        state = batch.load(seg.id)
        if state.version and (not state.ended or state.pinned):
            return False
    return True


def execute_prune(
    store: Store,
    plan: PrunePlan,
    *,
    actor: str = "",
    batch_size: int = 500,
    progress: Callable[[int, int], None] | None = None,
) -> list[Deleted]:
    """Delete the planned conversations in one transaction, then scrub the WAL once.

    The full-text purge strategy is chosen for the whole prune (``projections.purge``): many
    deleted messages are cheapest as delete markers plus one index ``optimize``; a few are
    cheapest as FTS5 secure-deletes, after merging a fragmented index first.
    Each unit is re-checked inside the transaction; one that was reopened or pinned since the
    plan was made is skipped (appended to ``plan.kept``).
    """
    done: list[Deleted] = []
    total = plan.sessions
    removed = 0
    with store.transaction() as batch:
        deleted = sum(batch.load(sid).message_count for u in plan.selected for sid in u.ids)
        optimize = prefer_optimize(deleted, indexed_messages(batch.conn))
    if total >= MERGE_FIRST and not optimize:
        merge_fts(store.connection())
    with store.transaction() as batch, purging(batch.conn, optimize=optimize):
        gone: set[str] = set()
        for chunk in _chunks(plan.selected, batch_size):
            for unit in chunk:
                if not _still_prunable(batch, unit):
                    plan.kept.append(Kept(tip_id=unit.tip.id, reason="changed during prune"))
                    continue
                for sid in reversed(unit.ids):
                    if sid in gone or batch.load(sid).version == 0:
                        continue
                    for target in [*reversed(delegate_tree(batch, sid)), sid]:
                        if target not in gone:
                            done.append(remove_stream(batch, store, target, "prune", actor))
                            gone.add(target)
            removed += sum(len(u.members) + len(u.delegates) for u in chunk)
            if progress is not None:
                progress(min(removed, total), total)
        drop_unreferenced_prompts(batch, store)
    if done and not scrub_wal(store):
        done = [msgspec.structs.replace(d, scrubbed=False) for d in done]
    return done
