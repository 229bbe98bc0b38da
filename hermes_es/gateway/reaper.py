"""Orphan reaping: ending local sessions whose last viewer disappeared without closing them.

A CLI/TUI/desktop/dashboard session whose last attached connection dropped is ended
``sessions.orphan_end_grace_s`` seconds later (0: never) with end reason ``ws_orphan_reap``;
``dashboard.ws_orphan_reap_grace_s: 0`` turns that off too. A viewer that reattaches within the
grace keeps it open; a running or queued turn finishes first; a session paused on an unknown
turn stays open until it is resolved. After a restart a sweep ends such sessions (open, idle,
local, left by an earlier run) with ``startup_orphan_reap``, no sooner than 6 hours after their
last activity: at once when that is past, else when it comes, unless a viewer attached
meanwhile (``dashboard.startup_orphan_sweep: false`` turns it off). Sessions of messaging
routes are never reaped here. Ending is non-destructive: the next message reopens the same id.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from hermes_es.queries import turns as q

if TYPE_CHECKING:
    from hermes_es.gateway.authority import SessionAuthority

log = logging.getLogger("hermes.gateway")

REAPABLE_SOURCES = frozenset({"cli", "tui", "desktop", "dashboard"})
"""Sources of local sessions a viewer opens; messaging routes and workers are never reaped."""

STARTUP_MIN_IDLE_S = 6 * 3600.0
"""The startup sweep ends nothing active in the last 6 hours."""


class Reaper:
    """Timers for orphaned sessions, and the startup sweep."""

    def __init__(
        self,
        authority: SessionAuthority,
        *,
        grace_s: float,
        enabled: bool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.authority = authority
        self.grace_s = grace_s
        self.enabled = enabled and grace_s > 0
        self.clock = clock
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.later: dict[str, asyncio.TimerHandle] = {}
        """Sessions the start-up sweep found open but active too recently: each one's timer
        for the moment it has been idle 6 hours."""
        self.waiting: set[str] = set()
        """Orphans whose grace ran out while a turn ran or was unknown: re-checked later."""
        self.reaped: list[str] = []

    def viewer_attached(self, session_id: str) -> None:
        """A viewer came (back): the session is not orphaned."""
        for timers in (self.timers, self.later):
            timer = timers.pop(session_id, None)
            if timer is not None:
                timer.cancel()
        self.waiting.discard(session_id)

    def last_viewer_left(self, session_id: str, *, dropped: bool) -> None:
        """The last viewer went; when it dropped without closing, start the grace."""
        if not dropped or not self.enabled:
            return
        state = q.head(self.authority._read(), session_id)
        if state is None or state.ended or state.source not in REAPABLE_SOURCES:
            return
        self.viewer_attached(session_id)  # reset any earlier timer
        loop = self.authority.loop
        self.timers[session_id] = loop.call_later(self.grace_s, self._due, session_id)

    def turns_idle(self, session_id: str) -> None:
        """The session's queue went idle (or an unknown turn was resolved): re-check it."""
        if session_id in self.waiting:
            self.waiting.discard(session_id)
            self._due(session_id)

    def _due(self, session_id: str) -> None:
        self.timers.pop(session_id, None)
        if self.authority.viewers(session_id):
            return
        state = q.head(self.authority._read(), session_id)
        if state is None or state.ended:
            return
        if state.turn_running or state.turn_queue or state.turns_unknown:
            self.waiting.add(session_id)  # a turn finishes first; an unknown one is resolved
            return
        self.authority.loop.create_task(self._end(session_id, "ws_orphan_reap"))

    async def _end(self, session_id: str, reason: str) -> None:
        engine = self.authority.engine.with_actor("gateway:reaper")
        try:
            await self.authority.write(lambda: engine.end_session(session_id, reason))
        except Exception as exc:  # a session deleted meanwhile: nothing to end
            log.info("reaper: %s not ended: %s", session_id, exc)
            return
        self.reaped.append(session_id)
        self.authority.publish(session_id)

    async def startup_sweep(self, held: set[str] | None = None) -> list[str]:
        """End local sessions left open by an earlier run and idle for 6 hours or more; the
        ones active more recently get a timer for the moment they will have been."""
        now = self.clock()
        idle_before = now - STARTUP_MIN_IDLE_S
        conn = self.authority._read()
        found = q.sweep_candidates(conn, REAPABLE_SOURCES, idle_before)
        chosen = [sid for sid in found if sid not in (held or set())]
        for sid, last_active in q.sweep_later(conn, REAPABLE_SOURCES, idle_before):
            if sid not in (held or set()):
                self._sweep_at(sid, last_active + STARTUP_MIN_IDLE_S - now)
        # submitted together: the writer commits them in as few groups as it can
        await asyncio.gather(*(self._end(sid, "startup_orphan_reap") for sid in chosen))
        return chosen

    def _sweep_at(self, session_id: str, delay: float) -> None:
        loop = self.authority.loop
        self.later[session_id] = loop.call_later(max(delay, 0.0), self._sweep_due, session_id)

    def _sweep_due(self, session_id: str) -> None:
        """A session the start-up sweep left for later: end it if nobody came back to it (a
        viewer that attached cancelled this; one that left since is the grace's business),
        it did nothing for 6 hours and no process of its own holds it."""
        self.later.pop(session_id, None)
        if self.authority.viewers(session_id):
            return
        state = q.head(self.authority._read(), session_id)
        if state is None or state.ended or state.turn_running or state.turn_queue:
            return
        if state.turns_unknown:
            return  # stays open until it is resolved
        idle_for = self.clock() - state.last_active
        if idle_for < STARTUP_MIN_IDLE_S:  # active since (without a viewer): later again
            self._sweep_at(session_id, STARTUP_MIN_IDLE_S - idle_for)
            return
        if session_id in _held(self.authority):
            return
        self.authority.loop.create_task(self._end(session_id, "startup_orphan_reap"))

    def stop(self) -> None:
        """Cancel every pending timer."""
        for timers in (self.timers, self.later):
            for timer in timers.values():
                timer.cancel()
            timers.clear()


def _held(authority: SessionAuthority) -> set[str]:
    """Sessions an embedded process of this store holds open now (never swept)."""
    from hermes_es.commands.holders import held_sessions

    try:
        return held_sessions(authority.engine.db_path)
    except OSError:
        return set()
