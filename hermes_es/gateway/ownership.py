"""Who executes for a profile: the gateway's role in its team (owner or standby).

On a SQLite store the profile's local lock (``server.profile_lock``) is the whole story: the one
gateway is the owner. On a PostgreSQL store several gateways (as on several hosts, each with its
own HERMES_HOME) may run for one profile; ``Team`` takes the store's ownership lock
(``store/postgres/team.py``):

- free: this gateway is the **owner**: it begins a new epoch, recovers (started-unfinished turns
  become ``unknown``), and executes;
- held: it is a **standby**: it serves reads, attaches and the live stream of stored events; it
  also accepts the writes that start nothing (``authority.STANDBY_WRITES``: a submission is
  admitted to the shared log, then the owner is told through the team relay to run it), and
  answers the rest (deletes, most mutations) with ``NOT_OWNER`` naming the live owner;
  meanwhile it waits for the lock and, the moment the owner's connection ends, takes over
  exactly like a restart.

Every gateway publishes where it listens in the registry, and follows the log through
LISTEN/NOTIFY (``store/postgres/notify.py``), so clients attached to any gateway of the team
receive the events the owner commits. What is not stored travels on the team relay
(``store/postgres/relay.py``, a NOTIFY channel of the profile): the owner's live
``turn.stream`` items, which each standby hands to its own attached clients (the owner
commits them before it writes the end of their turn, so they arrive first), and a standby's
``kick`` after it admitted or resolved a turn. An owner whose lock connection stops answering
stops executing at once and exits (another gateway may own the profile by then).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes_es.gateway.authority import SessionAuthority
    from hermes_es.store.postgres.notify import LogListener
    from hermes_es.store.postgres.relay import RelaySender
    from hermes_es.store.postgres.team import GatewayRegistry, GatewayRow, OwnerLock

log = logging.getLogger("hermes.gateway")

WATCH_S = 1.0
"""How often an owner checks that its lock connection still answers."""

FLUSH_S = 1.0
"""Longest an owner waits for its streamed items to be sent before it ends their turn."""

REKICK_S = 2.0
"""After a standby's kick: how often it checks that the owner started the session's turn."""

REKICKS = 15
"""How many times a standby repeats a kick the owner seems not to have heard."""


class Team:
    """The ownership of one gateway process (see the module docstring)."""

    def __init__(
        self,
        authority: SessionAuthority,
        *,
        profile: str,
        instance_id: str,
        url: str | None,
        on_lost: Callable[[], None] = lambda: None,
    ) -> None:
        self.authority = authority
        self.profile = profile
        self.instance_id = instance_id
        self.url = url
        """The PostgreSQL store's URL (None on SQLite: no team, always the owner)."""
        self.on_lost = on_lost
        self.role = "starting"
        self.hostname = socket.gethostname()
        self.started_at = time.time()
        self.took_over_s: float | None = None
        """Seconds from the lock becoming free to executing (after a standby took over)."""
        self.on_promoted: list[Callable[[], None]] = []
        self.endpoint: tuple[str, int] | None = None
        self._lock: OwnerLock | None = None
        self._registry: GatewayRegistry | None = None
        self._listener: LogListener | None = None
        self._relay: RelaySender | None = None
        self._unflushed = False
        self.relayed = 0
        """Live items this gateway received from the owner and handed to its clients."""
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()

    @property
    def is_team(self) -> bool:
        """True on a PostgreSQL store (other gateways may share the profile)."""
        return self.url is not None

    async def start(self, promote: Callable[[], Awaitable[None]]) -> None:
        """Own the profile now (``promote`` runs before this returns), or become a standby
        that runs ``promote`` once the lock is free."""
        authority = self.authority
        authority.status_extra = self.status
        if self.url is None:
            await self._promote(promote)
            return
        from hermes_es.store.postgres.notify import LogListener
        from hermes_es.store.postgres.relay import Reassembler, RelaySender, channel_for
        from hermes_es.store.postgres.team import GatewayRegistry, OwnerLock

        loop = asyncio.get_running_loop()
        conn = authority.engine.store.connection()
        self._registry = await asyncio.to_thread(GatewayRegistry, conn)

        def changed(versions: dict[str, int]) -> None:
            loop.call_soon_threadsafe(authority.publish_many, versions)

        reassembler = Reassembler(self.instance_id)

        def relayed(payload: str) -> None:  # on the listener's thread
            got = reassembler.feed(payload)
            if got is not None:
                loop.call_soon_threadsafe(self._relayed, got[1])

        self._relay = RelaySender(self.url, self.profile, self.instance_id).start()
        authority.on_stream = self._stream_out
        authority.before_finish = self._flush
        authority.on_standby_write = self._kick_owner
        self._listener = LogListener(
            self.url, changed, channels={channel_for(self.profile): relayed}
        ).start()
        await asyncio.to_thread(self._listener.ready.wait, 10)
        self._lock = OwnerLock(self.url, self.profile)
        authority.fenced = True
        authority.on_epoch_ended = self._epoch_ended
        authority.owner_hint = self.owner_hint
        if await asyncio.to_thread(self._lock.try_acquire):
            await self._promote(promote)
            return
        self.role = "standby"
        authority.role = "standby"
        log.info("standby: another gateway owns profile %s; waiting for its lock", self.profile)
        self._tasks.append(asyncio.create_task(self._stand_by(promote)))

    async def _promote(self, promote: Callable[[], Awaitable[None]]) -> None:
        await promote()
        self.role = "owner"
        self.authority.role = "owner"
        await self.publish()
        if self._lock is not None:
            self._tasks.append(asyncio.create_task(self._watch()))
        for hook in self.on_promoted:
            hook()

    async def _stand_by(self, promote: Callable[[], Awaitable[None]]) -> None:
        lock = self._lock
        assert lock is not None
        while not self._stop.is_set():
            try:
                if await asyncio.to_thread(lock.wait):
                    break
            except Exception as exc:  # keep waiting: a standby that stops waiting never takes over
                log.warning("waiting for the ownership lock failed (%s); retrying", exc)
                await asyncio.sleep(0.5)
        else:
            return
        if self._stop.is_set():  # acquired while stopping: closing the lock releases it
            return
        freed = time.monotonic()
        log.info("the owner's lock was released: taking over profile %s", self.profile)
        try:
            await self._promote(promote)
        except Exception:
            log.exception("taking over failed; stopping")
            self.on_lost()
            return
        self.took_over_s = time.monotonic() - freed
        log.info(
            "took over profile %s as owner in %.0f ms (epoch %d)",
            self.profile,
            self.took_over_s * 1000,
            self.authority.epoch,
        )

    async def _watch(self) -> None:
        lock = self._lock
        assert lock is not None
        while not self._stop.is_set():
            await asyncio.sleep(WATCH_S)
            if self._stop.is_set():
                return
            if not await asyncio.to_thread(lock.check):
                if self._stop.is_set():
                    return
                log.error(
                    "the ownership lock's connection stopped answering: this gateway no longer"
                    " owns profile %s; it stops executing and exits",
                    self.profile,
                )
                self.role = "lost"
                self.authority.role = "lost"
                self.on_lost()
                return

    def _epoch_ended(self) -> None:
        if self._stop.is_set() or self.role == "lost":
            return
        log.error(
            "a newer epoch of profile %s began: this gateway no longer owns it; it stops"
            " executing and exits",
            self.profile,
        )
        self.role = "lost"
        self.on_lost()

    # -- the team relay (live items and kicks, not stored) --------------------------------------

    def _stream_out(self, session_id: str, params: dict[str, Any]) -> None:
        """The owner streamed an item: the other gateways' clients get it too."""
        if self.role == "owner" and self._relay is not None:
            self._relay.send({"t": "stream", "p": params})
            self._unflushed = True

    async def _flush(self) -> None:
        """Before a turn's end is written: what it streamed is committed to the relay first
        (so a standby's clients get the items before the event that finishes the turn)."""
        relay = self._relay
        if relay is None or not self._unflushed:
            return
        self._unflushed = False
        if not await asyncio.to_thread(relay.flush, FLUSH_S):
            log.warning("team relay: streamed items not sent within %.0f s", FLUSH_S)

    def _kick_owner(self, session_id: str, tries: int = 0) -> None:
        """A standby admitted or resolved a turn of ``session_id``: the owner runs it. A kick
        is live-only (lost while the owner's listener reconnects): while the session still has
        a turn that may start and none runs, it is sent again every ``REKICK_S`` s."""
        if self._relay is None or self._stop.is_set() or self.role != "standby":
            return
        self._relay.send({"t": "kick", "s": session_id})
        if tries < REKICKS:
            loop = asyncio.get_running_loop()
            loop.call_later(REKICK_S, self._rekick, session_id, tries + 1)

    def _rekick(self, session_id: str, tries: int) -> None:
        from hermes_es.aggregates.turns import next_runnable
        from hermes_es.queries import turns as q

        if self.role != "standby" or self._stop.is_set():
            return
        try:
            state = q.head(self.authority.engine.store.connection(), session_id)
        except Exception as exc:  # the store is unreachable: the takeover will recover it
            log.warning("cannot read session %s to repeat its kick: %s", session_id, exc)
            return
        if state is not None and next_runnable(state):
            self._kick_owner(session_id, tries)

    def _relayed(self, message: dict[str, Any]) -> None:
        """On the loop: a message from another gateway of the team."""
        kind = message.get("t")
        if kind == "stream" and self.role != "owner":
            params = message.get("p")
            if isinstance(params, dict) and isinstance(params.get("session_id"), str):
                self.relayed += 1
                self.authority.stream(params["session_id"], params)
        elif kind == "kick" and self.role == "owner":
            session_id = message.get("s")
            if isinstance(session_id, str):
                self.authority.kick(session_id)

    # -- the registry -------------------------------------------------------------------------

    def listening(self, host: str, port: int) -> None:
        """Where this gateway listens (known once the server is up)."""
        self.endpoint = (host, port)

    def _row(self) -> GatewayRow:
        from hermes_es.store.postgres.team import GatewayRow

        host, port = self.endpoint or ("127.0.0.1", 0)
        return GatewayRow(
            instance_id=self.instance_id,
            profile=self.profile,
            role=self.role,
            hostname=self.hostname,
            host=host,
            port=port,
            pid=os.getpid(),
            epoch=self.authority.epoch,
            backend_pid=self._lock.backend_pid if self._lock is not None else 0,
            started_at=self.started_at,
            updated_at=time.time(),
        )

    async def publish(self) -> None:
        """Write this gateway's registry row (role, endpoint, epoch); a no-op on SQLite."""
        registry = self._registry
        if registry is None or self.endpoint is None:
            return
        row = self._row()
        if row.role == "owner":
            await asyncio.to_thread(registry.forget_dead, self.profile)
        await asyncio.to_thread(registry.publish, row)

    def owner(self) -> dict[str, Any] | None:
        """The live owner as the registry shows it (this gateway itself when it owns)."""
        if self.url is None or self.role == "owner":
            if self.endpoint is None:
                return None
            return _describe(self._row())
        registry = self._registry
        if registry is None:
            return None
        row = registry.live_owner(self.profile)
        return _describe(row) if row is not None else None

    def owner_hint(self) -> dict[str, Any] | None:
        """What ``NOT_OWNER`` tells a client: the live owner (None while none is live)."""
        try:
            return self.owner()
        except Exception as exc:  # the store is unreachable: say so, do not fail the answer
            log.warning("cannot read the live owner: %s", exc)
            return None

    def members(self) -> list[dict[str, Any]]:
        """The team's live gateways (owner first)."""
        if self._registry is None:
            return []
        return [_describe(r) for r in self._registry.members(self.profile)]

    def status(self) -> dict[str, Any]:
        """What ``gateway.status`` adds: role, owner, team."""
        info: dict[str, Any] = {
            "role": self.role,
            "instance_id": self.instance_id,
            "hostname": self.hostname,
            "team": self.is_team,
            "owner": self.owner_hint(),
        }
        if self.is_team:
            try:
                info["members"] = self.members()
            except Exception as exc:  # the store is unreachable: the rest still answers
                info["members_error"] = str(exc)
        if self.took_over_s is not None:
            info["took_over_ms"] = round(self.took_over_s * 1000, 1)
        if self.is_team:
            info["relayed"] = self.relayed
        return info

    async def stop(self) -> None:
        """Leave the team: stop waiting/watching, remove this gateway's row, release the lock."""
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._listener is not None:
            await asyncio.to_thread(self._listener.stop)
        if self._relay is not None:
            await asyncio.to_thread(self._relay.stop)
        if self._registry is not None:
            try:
                await asyncio.to_thread(self._registry.remove, self.instance_id)
            except Exception as exc:
                log.warning("cannot remove this gateway's registry row: %s", exc)
        if self._lock is not None:
            await asyncio.to_thread(self._lock.close)


def _describe(row: GatewayRow) -> dict[str, Any]:
    return {
        "instance_id": row.instance_id,
        "role": row.role,
        "hostname": row.hostname,
        "host": row.host,
        "port": row.port,
        "pid": row.pid,
        "epoch": row.epoch,
        "url": row.ws_url,
        "http_url": f"http://{row.host}:{row.port}",
    }
