"""``SessionAuthority``: the one owner of execution for a profile's sessions.

Submitted prompts are admitted (an event keyed by the client's submission id), queued first in
first out per session, started in the gateway's epoch, run through the one turn runner
(``commands.chat.Chat.send``) and finished; all of it is events on the session stream, written
through the group-commit writer. Every attached client of a session receives the same ordered
stream: the stored events, read back from the log in version order after each commit (a
reconnecting client asks ``events.since`` for what it missed; the live fan-out and the replay
read the same stream).

Everything here runs on the event loop except the turn itself, which runs on a worker thread
(the responder blocks on HTTP); the writer thread does every write.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from hermes_es.aggregates.turns import next_runnable
from hermes_es.commands import turn_steps, turns
from hermes_es.commands.group_engine import GroupCommitEngine
from hermes_es.errors import (
    AmbiguousSessionError,
    ConflictError,
    HermesError,
    InvariantError,
    SessionNotFoundError,
    StoreBusyError,
    ValidationError,
)
from hermes_es.events.turns import TurnAdmitted
from hermes_es.gateway import protocol as p
from hermes_es.gateway.identity import CLIENT_KINDS, Principal
from hermes_es.queries import turns as q

if TYPE_CHECKING:
    from hermes_es.aggregates.state import SessionState
    from hermes_es.commands.chat import Chat, TurnOutcome, TurnPlan
    from hermes_es.commands.turn_events import TurnEvent
    from hermes_es.config import LoadedConfig
    from hermes_es.gateway.reaper import Reaper
    from hermes_es.gateway.trace import AdmissionTrace
    from hermes_es.projections.base import Change

T = TypeVar("T")
log = logging.getLogger("hermes.gateway")

MAX_CHATS = 256
"""Sessions whose chat (window and prompt) the gateway keeps in memory."""

DRAIN_SECONDS = 30.0
"""How long SIGTERM waits for running turns before exiting anyway."""


class RpcError(Exception):
    """A JSON-RPC error to answer with."""

    def __init__(self, code: int, message: str, **data: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def rpc_error_for(exc: HermesError) -> RpcError:
    """The protocol error for an expected failure."""
    if isinstance(exc, AmbiguousSessionError):
        return RpcError(p.NOT_FOUND, exc.message, candidates=exc.candidates)
    if isinstance(exc, SessionNotFoundError):
        return RpcError(p.NOT_FOUND, exc.message)
    if isinstance(exc, ConflictError):
        return RpcError(p.CONFLICT, exc.message, expected=exc.expected, actual=exc.actual)
    if isinstance(exc, InvariantError):
        if "deleted" in exc.message:
            return RpcError(p.NOT_FOUND, exc.message)
        return RpcError(p.REFUSED, exc.message)
    if isinstance(exc, ValidationError):
        return RpcError(p.INVALID, exc.message)
    if isinstance(exc, StoreBusyError):
        return RpcError(p.BUSY, exc.message)
    return RpcError(p.INTERNAL_ERROR, exc.message)


class Client:
    """One attached connection: its principal, its kind, its sessions and its outgoing frames."""

    def __init__(
        self,
        principal: Principal,
        kind: str,
        send: Callable[[bytes], None],
        send_all: Callable[[list[bytes]], None] | None = None,
    ) -> None:
        self.principal = principal
        self.kind = kind
        self.send = send
        self.send_all = send_all or self._send_each
        """Sends several frames, in order (the connection's ``Outbox.send_all``)."""
        self.sessions: set[str] = set()
        self.created: set[str] = set()
        """Sessions this connection created (a worker may only touch these)."""
        self.closed = False
        self.read_at: tuple[float, ...] = ()
        """When the request being answered was read (``trace`` only)."""
        self.received_at: tuple[float, ...] = ()
        """When its bytes came off the socket (``trace`` only)."""
        self.request_id: int | str | None = None
        """The id of the request being answered."""
        self.answered: int | str | None = None
        """The id of a request already answered by ``answer_now``."""
        self.traced = ""
        """The submission id of the answer about to be sent (``trace`` only)."""
        self.on_answer: Callable[[str, bytes], None] | None = None
        """The trace's hook for an answer frame (``trace`` only)."""

    def _send_each(self, frames: list[bytes]) -> None:
        for frame in frames:
            self.send(frame)

    def answer_now(self, result: Any) -> None:
        """Send the answer to the request being run, before its handler resumes (which then
        sends nothing for it). Only for a request on a connection answered in order."""
        if self.request_id is None or self.kind == "http":
            return
        frame = p.encode(p.Response(id=self.request_id, result=result))
        if self.traced and self.on_answer is not None:
            self.on_answer(self.traced, frame)
            self.traced = ""
        self.answered = self.request_id
        self.send(frame)


class SessionAuthority:
    """Admission queues, the turn runner, subscriptions and fan-out for one profile."""

    def __init__(
        self,
        engine: GroupCommitEngine,
        *,
        loaded: LoadedConfig,
        profile: str,
        profile_dir: Path,
        epoch: int,
        turn_threads: int = 8,
    ) -> None:
        self.engine = engine
        self.loaded = loaded
        self.profile = profile
        self.profile_dir = profile_dir
        self.epoch = epoch
        self.loop = asyncio.get_running_loop()
        self.pool = ThreadPoolExecutor(max_workers=turn_threads, thread_name_prefix="hermes-turn")
        self.subscribers: dict[str, set[Client]] = {}
        self.published: dict[str, int] = {}
        self.runners: dict[str, asyncio.Future[None]] = {}
        """Each session's queue worker (a task), or the turn started with its admission (a
        future resolved once it finished): the session's turns run while it is not done."""
        self.chats: OrderedDict[str, Chat] = OrderedDict()
        """Each session's chat (window and prompt in memory), least recently used first."""
        self.max_chats = MAX_CHATS
        self.draining = False
        self.reaper: Reaper | None = None
        self._responder: Any = None
        self.admitted_by: dict[tuple[str, int], str] = {}
        """(session, turn) → the key of who submitted it, while it waits to run."""
        self.admitted_texts: dict[tuple[str, int], str] = {}
        """(session, turn) → its prompt text as admitted, while it waits to run (no read of
        the session's admissions from the log per turn)."""
        self.role = "owner"
        """``owner`` executes; a ``standby`` of a team (see ``ownership.py``) only serves reads."""
        self.owner_hint: Callable[[], dict[str, Any] | None] = lambda: None
        """The live owner, for the ``NOT_OWNER`` answer of a standby."""
        self.fenced = False
        """A team's owner: each turn start checks that its epoch is still the profile's."""
        self.on_epoch_ended: Callable[[], None] = lambda: None
        self.status_extra: Callable[[], dict[str, Any]] = dict
        """What ``gateway.status`` adds (the team: role, owner)."""
        self.on_stream: Callable[[str, dict[str, Any]], None] | None = None
        """A team: each live ``turn.stream`` item, for the other gateways' clients."""
        self.before_finish: Callable[[], Awaitable[None]] | None = None
        """A team: awaited before a turn's end is written (its streamed items go first)."""
        self.on_standby_write: Callable[[str], None] = lambda session_id: None
        """A standby admitted or resolved a turn of the session: the owner is told to run it."""
        self._read = engine.store.connection  # this (loop) thread's connection: reads only
        self._heads: dict[str, SessionState] = {}
        """A session's head as the gateway's last use case of it left it (an admission, a
        turn's end), for its queue worker's next look: used only while it is still the
        committed one (``_known_head``), so the worker need not read it back."""
        self._responding: list[
            tuple[str, int, Chat, str, turn_steps.Begun, str, asyncio.Future[None]]
        ] = []
        """Turns started with their admissions by the current hand-back, to answer once it is
        done (``_respond_started``)."""
        self._held: dict[str, list[bytes]] = {}
        """Sessions whose turn runs inline: its ``turn.stream`` frames, held until the
        session's next stored events go out (they are written with them, before them)."""
        self.trace: AdmissionTrace | None = None
        """Admission timing (``HERMES_GATEWAY_TRACE``), else None."""
        if engine.writer.reports_changes:
            # Every write goes through the writer, which hands over what each group stored
            # (on this loop, before the group's waiters resume): the fan-out sends those
            # events as they are, with no read back from the log and no wake-up per write.
            engine.writer.listen(self._committed)
        else:
            engine.on_change = self._changed_from_thread

    # -- writes -------------------------------------------------------------------------------

    async def write(
        self,
        fn: Callable[[], T],
        *,
        alone: bool = False,
        urgent: bool = False,
        pure: bool = False,
        then: Callable[[T], None] | None = None,
    ) -> T:
        """Run a use case on the writer; resolves after its group committed (``urgent``: ahead
        of the queued use cases, in the next group; ``pure``: it only reads and writes through
        the store's batches, so the writer may decide it without SQL, ``GroupWriter.submit``)."""
        waiter = self.engine.writer.submit_async(
            fn, alone=alone, urgent=urgent, pure=pure, then=then
        )
        try:
            return await waiter
        except HermesError as exc:
            raise rpc_error_for(exc) from exc

    def engine_for(self, principal: Principal) -> GroupCommitEngine:
        """The engine acting as ``principal`` (its key is every event's actor)."""
        return self.engine.with_actor(principal.key)

    # -- fan-out ------------------------------------------------------------------------------

    def _changed_from_thread(self, session_id: str) -> None:
        self.loop.call_soon_threadsafe(self.publish, session_id)

    def publish(self, session_id: str) -> None:
        """Send every attached client of the session its stored events not yet sent, in order."""
        clients = self.subscribers.get(session_id)
        if not clients:
            return
        after = self.published.get(session_id, 0)
        events = q.events_since(self._read(), session_id, after)
        self._send_events(session_id, clients, events)

    def _send_events(
        self,
        session_id: str,
        clients: set[Client],
        events: Sequence[q.StreamEvent | p.LiveEvent],
    ) -> None:
        held = self._held.get(session_id)
        if held:
            self._release(session_id, clients)
        # encoded once, from the Struct: the same bytes to every client, in order
        frames = [p.encode(p.Notification(method="session.event", params=e)) for e in events]
        if frames:
            for client in list(clients):
                client.send_all(frames)
        if events:
            self.published[session_id] = events[-1].sequence

    def publish_many(self, versions: dict[str, int]) -> None:
        """Streams committed to, with their newest versions (the store's LISTEN/NOTIFY
        follower): publish the attached ones whose clients have not had those yet."""
        for session_id, version in versions.items():
            if session_id in self.subscribers and self.published.get(session_id, 0) < version:
                self.publish(session_id)

    def _after_write(self, session_id: str) -> None:
        """After a grouped write of the session: the commit listener has already sent its
        events (it runs before the write's waiter resumes); without one, read the log."""
        if not self.engine.writer.reports_changes:
            self.publish(session_id)

    def _committed(self, changes: list[Change]) -> None:
        """The writer stored ``changes`` (one group, log order): send the attached clients of
        each session its new events, built from the changes themselves. A session whose
        next event is not the first one here (attached mid-way, written by another path)
        catches up from the log instead, so the stream stays gapless and in order."""
        by_session: dict[str, list[Change]] = {}
        for change in changes:
            event = change.event
            if type(event) is TurnAdmitted:
                # Known before any waiter of the group resumes: a session's queue worker
                # that reaches this turn first still runs it inline, as the submitter's.
                key = (change.stream, event.turn)
                self.admitted_by.setdefault(key, event.actor)
                self.admitted_texts.setdefault(key, event.text)
            if change.stream in self.subscribers:
                by_session.setdefault(change.stream, []).append(change)
        for sid, mine in by_session.items():
            clients = self.subscribers.get(sid)
            if not clients:
                continue
            after = self.published.get(sid, 0)
            fresh = [c for c in mine if c.version > after]
            if not fresh:
                continue
            if fresh[0].version != after + 1:
                self.publish(sid)
                continue
            self._send_events(sid, clients, [p.live_event(sid, c.version, c.event) for c in fresh])

    def _release(self, session_id: str, clients: set[Client] | None) -> None:
        """Write the session's held ``turn.stream`` frames, in order, to its clients."""
        held = self._held.get(session_id)
        if not held:
            return
        frames = held[:]
        held.clear()
        for client in list(clients or ()):
            client.send_all(frames)

    def broadcast(self, method: str, params: dict[str, Any]) -> None:
        """A notification to every attached client (``gateway.draining``)."""
        frame = p.encode(p.Notification(method=method, params=params))
        seen: set[int] = set()
        for clients in self.subscribers.values():
            for client in clients:
                if id(client) not in seen:
                    seen.add(id(client))
                    client.send(frame)

    def attach(self, client: Client, session_id: str) -> int:
        """Subscribe ``client`` to the session; returns the sequence live events start after."""
        clients = self.subscribers.setdefault(session_id, set())
        if not clients or session_id not in self.published:
            state = q.head(self._read(), session_id)
            self.published[session_id] = state.version if state else 0
        clients.add(client)
        client.sessions.add(session_id)
        if self.reaper is not None:
            self.reaper.viewer_attached(session_id)
        return self.published[session_id]

    def detach(self, client: Client, session_id: str, *, dropped: bool) -> None:
        """Unsubscribe; ``dropped`` when the connection went away without closing the session."""
        clients = self.subscribers.get(session_id)
        if clients is not None:
            clients.discard(client)
            if not clients:
                del self.subscribers[session_id]
        client.sessions.discard(session_id)
        if self.reaper is not None and not self.viewers(session_id):
            self.reaper.last_viewer_left(session_id, dropped=dropped)

    def viewers(self, session_id: str) -> int:
        """How many clients are attached to the session."""
        return len(self.subscribers.get(session_id, ()))

    def disconnect(self, client: Client) -> None:
        """A connection closed: it detaches from every session (accepted work goes on)."""
        client.closed = True
        for sid in list(client.sessions):
            self.detach(client, sid, dropped=True)

    # -- turns --------------------------------------------------------------------------------

    def kick(self, session_id: str) -> None:
        """Make sure the session's queue is being worked on."""
        if self.draining or self.role != "owner":
            return
        task = self.runners.get(session_id)
        if task is None or task.done():
            self.runners[session_id] = self.loop.create_task(self._work_queue(session_id))

    async def _work_queue(self, session_id: str) -> None:
        engine = self.engine
        epoch = self.epoch
        fence = self.profile if self.fenced else ""
        while not self.draining and self.role == "owner":
            state = self._known_head(session_id)
            if state is not None and not next_runnable(state):
                # Nothing may start (the queue is empty, or paused on an unknown turn): no
                # trip through the writer. An admission committed after this read finds
                # this task done and kicks a new one (no await between here and the end).
                break
            if state is not None:
                ran = await self._inline_turn(session_id, state)
                if ran in ("stop", "idle"):
                    break
                if ran == "ran":
                    continue
            try:
                turn = await self.write(
                    lambda: turns.start_next(engine, session_id, epoch=epoch, fence=fence),
                    pure=True,
                )
            except RpcError as exc:
                self._start_refused(session_id, exc)
                break
            self._after_write(session_id)
            if not turn:
                break
            text = self.admitted_texts.pop((session_id, turn), None)
            if text is None:  # admitted before this gateway started: from the log
                text = q.admitted_text(self._read(), session_id, turn) or ""
            actor = self._admitted_actor(session_id, turn)
            try:
                outcome = await self.loop.run_in_executor(
                    self.pool, self._run_turn, session_id, turn, text, actor
                )
            except HermesError as exc:
                await self._finish(session_id, turn, "failed", error=exc.message)
            except Exception as exc:  # an unexpected failure still finishes the turn
                log.exception("session %s turn %d failed", session_id, turn)
                await self._finish(session_id, turn, "failed", error=f"internal error: {exc}")
            else:
                await self._finish(session_id, turn, "completed", seqs=outcome.seqs)
        if self.reaper is not None:
            self.reaper.turns_idle(session_id)

    def _known_head(self, session_id: str) -> SessionState | None:
        """The session's committed head: the one its last use case here left, when nothing
        has been stored for it since (its attached clients have been sent every event up to
        that version, and no other gateway of a team writes the log), else read."""
        known = self._heads.pop(session_id, None)
        if (
            known is not None
            and not self.fenced
            and session_id in self.subscribers
            and self.published.get(session_id) == known.version
        ):
            return known
        return q.head(self._read(), session_id)

    def _start_refused(self, session_id: str, exc: RpcError) -> None:
        """A turn could not start: logged; an ended epoch means this gateway lost the profile."""
        log.warning("session %s: cannot start its next turn: %s", session_id, exc.message)
        if isinstance(exc.__cause__, turns.EpochEndedError):
            self.role = "lost"
            self.on_epoch_ended()

    async def _inline_turn(self, session_id: str, state: SessionState) -> str:
        """Run the session's next turn on this loop when nothing in it blocks: a responder
        that answers this prompt without I/O (the offline one, no tool), a chat whose window
        and prompt are in memory (``Chat.plan_turn``). Two writer use cases, both from the
        loop: ``begin`` (start + user message) and ``end`` (reply + finish); no thread, no
        read of the head in between. Returns ``ran``, ``idle`` (it ran, and nothing more may
        start), ``stop`` (the worker must stop), or ``no`` (this turn needs the threaded
        runner)."""
        turn = next_runnable(state)
        chat = self.chats.get(session_id)
        if chat is None or not turn:
            return "no"
        text = self.admitted_texts.get((session_id, turn))
        inline = getattr(self._responder, "answers_inline", None)
        if text is None or inline is None or not inline(text):
            return "no"
        plan = chat.plan_turn(text, state)
        if plan is None:
            return "no"
        self.chats.move_to_end(session_id)
        engine, epoch = self.engine, self.epoch
        fence = self.profile if self.fenced else ""
        actor = self.admitted_by.get((session_id, turn), engine.actor)
        seen = chat.version
        try:
            begun = await self.write(
                lambda: turn_steps.begin(
                    engine,
                    session_id,
                    turn,
                    epoch=epoch,
                    messages=[plan.user],
                    actor=actor,
                    display_version=seen,
                    fence=fence,
                ),
                pure=True,
            )
        except RpcError as exc:
            self._start_refused(session_id, exc)
            return "stop"
        self._after_write(session_id)
        if not begun.turn:  # the queue changed under the plan (a cancel): look again
            return "ran"
        self.admitted_by.pop((session_id, turn), None)
        self.admitted_texts.pop((session_id, turn), None)
        if begun.error:  # the session refused the message: the turn is finished, failed
            return "ran"
        if begun.transcript_moved:
            chat.reload()
        else:
            chat.recorded([plan.user], begun.version)
        # (The admissions the same commit answered are already written: the writer's
        # hand-back answers them before any waiter resumes.)
        # The responder answers at once, with no I/O: what it streams goes out with the
        # turn's end (one write to each client for both, not two), still before the reply.
        self._held[session_id] = []
        try:
            dicts, error = self._answer(chat, plan.prompt, session_id, turn)
            end = self._end_step(chat, session_id, turn, dicts, error, begun, actor)
            if self.before_finish is not None:
                await self.before_finish()
            try:
                ended = await self.write(end, pure=True)
            except RpcError as exc:
                log.error("session %s: cannot record turn %d: %s", session_id, turn, exc.message)
                self.chats.pop(session_id, None)  # its window may hold what was not stored
                return "stop"
            self._after_write(session_id)
        finally:  # what no commit has taken out yet (a failed end, no attached client)
            self._release(session_id, self.subscribers.get(session_id))
            self._held.pop(session_id, None)
        self._settle(session_id, chat, dicts, ended)
        # Nothing may start as of the commit: done, without reading the head again. An
        # admission committed after it resumes its submitter after this task has ended
        # (waiters resume in commit order), whose kick then starts a new worker.
        return "ran" if ended.runnable else "idle"

    def _answer(
        self, chat: Chat, prompt: str, session_id: str, turn: int
    ) -> tuple[list[dict[str, Any]], str]:
        """The responder's answer to a started turn: its messages, or the error that finishes
        the turn failed (an unexpected failure still finishes it)."""
        try:
            return chat.respond(prompt, on_event=self._streamer(session_id, turn)).dicts, ""
        except HermesError as exc:
            return [], exc.message
        except Exception as exc:
            log.exception("session %s turn %d failed", session_id, turn)
            return [], f"internal error: {exc}"

    def _end_step(
        self,
        chat: Chat,
        session_id: str,
        turn: int,
        dicts: list[dict[str, Any]],
        error: str,
        begun: turn_steps.Begun,
        actor: str,
    ) -> Callable[[], turn_steps.Ended]:
        """The use case that stores a turn's answer (or its error) and finishes it."""
        engine, display = self.engine, chat.version

        def end() -> turn_steps.Ended:
            return turn_steps.end(
                engine,
                session_id,
                turn,
                messages=dicts,
                actor=actor,
                user_seqs=begun.seqs,
                display_version=display,
                error=error,
            )

        return end

    def _settle(
        self, session_id: str, chat: Chat, dicts: list[dict[str, Any]], ended: turn_steps.Ended
    ) -> None:
        """After a turn's end was stored: the kept window follows it, or is dropped to be
        rebuilt from the log; the head is kept for the next admission
        (``_plan_with_admission``)."""
        if ended.outcome == "completed" and not ended.transcript_moved:
            chat.recorded(dicts, ended.version)
        elif ended.transcript_moved:
            self.chats.pop(session_id, None)
        if ended.head is not None:
            self._heads[session_id] = ended.head

    def _admitted_actor(self, session_id: str, turn: int) -> str:
        known = self.admitted_by.pop((session_id, turn), None)
        if known is not None:  # admitted by this gateway: no scan of the log
            return known
        for event in reversed(q.events_since(self._read(), session_id, 0)):
            if event.type == "hermes.turn.admitted" and event.event.get("turn") == turn:
                return event.actor
        return self.engine.actor

    async def _finish(
        self,
        session_id: str,
        turn: int,
        outcome: str,
        *,
        error: str = "",
        seqs: list[int] | None = None,
    ) -> None:
        engine = self.engine
        self.admitted_by.pop((session_id, turn), None)
        self.admitted_texts.pop((session_id, turn), None)
        if self.before_finish is not None:
            await self.before_finish()
        try:
            await self.write(
                lambda: turns.finish(
                    engine, session_id, turn, outcome=outcome, error=error, seqs=seqs or []
                ),
                pure=True,
            )
        except RpcError as exc:
            log.error("session %s: cannot record turn %d %s: %s", session_id, turn, outcome, exc)
        self._after_write(session_id)

    def _run_turn(self, session_id: str, turn: int, text: str, actor: str) -> TurnOutcome:
        """On a worker thread: the one turn runner, acting as the submitter; what it reports
        while it runs (reply deltas, tool calls and results) is streamed to attached clients."""
        chat = self.chats.get(session_id)
        if chat is None:
            chat = self._make_chat(session_id)
            self.loop.call_soon_threadsafe(self._keep_chat, session_id, chat)
        chat.engine = self.engine.with_actor(actor)
        on_loop = self._streamer(session_id, turn)

        def on_event(item: TurnEvent) -> None:
            self.loop.call_soon_threadsafe(on_loop, item)

        return chat.send(text, on_event=on_event)

    def _streamer(self, session_id: str, turn: int) -> Callable[[TurnEvent], None]:
        """On the loop: each item a turn reports while it runs, as a numbered ``turn.stream``
        notification to the session's attached clients."""
        index = 0

        def on_event(item: TurnEvent) -> None:
            nonlocal index
            index += 1
            params = {
                "session_id": session_id,
                "turn": turn,
                "index": index,
                "item": msgspec.to_builtins(item),
            }
            self.stream(session_id, params)

        return on_event

    def _keep_chat(self, session_id: str, chat: Chat) -> None:
        """On the loop: cache a session's chat, the least recently used one leaving once
        ``MAX_CHATS`` are kept (its next turn builds it again from the log)."""
        self.chats[session_id] = chat
        self.chats.move_to_end(session_id)
        while len(self.chats) > self.max_chats:
            self.chats.popitem(last=False)

    def stream(self, session_id: str, params: dict[str, Any]) -> None:
        """A live ``turn.stream`` item to every attached client (not stored: the turn is)."""
        if self.on_stream is not None:
            self.on_stream(session_id, params)
        clients = self.subscribers.get(session_id)
        if not clients:
            return
        frame = p.encode(p.Notification(method="turn.stream", params=params))
        held = self._held.get(session_id)
        if held is not None:
            held.append(frame)
            return
        for client in list(clients):
            client.send(frame)

    def _make_chat(self, session_id: str) -> Chat:
        from hermes_es.commands.chat import Chat
        from hermes_es.prompts.tools import tools_for_toolsets
        from hermes_es.responders import make_responder

        if self._responder is None:
            self._responder = make_responder(self.loaded.raw, os.environ)
        config = self.loaded.config
        state = self.engine.get(session_id)
        workspace = Path(state.cwd) if state.cwd and Path(state.cwd).is_dir() else None
        return Chat(
            self.engine,
            session_id,
            responder=self._responder,
            config=config,
            profile_dir=self.profile_dir,
            tools=tools_for_toolsets(config.toolsets),
            workspace=workspace,
        )

    async def recover(self) -> list[tuple[str, int]]:
        """Start-up: started-unfinished turns become unknown; queued work resumes elsewhere."""
        engine, epoch = self.engine, self.epoch
        marked = await self.write(lambda: turns.recover(engine, epoch=epoch))
        for sid in q.sessions_with_turns(self._read()):
            self.kick(sid)
        return marked

    async def drain(self, bound: float = DRAIN_SECONDS) -> bool:
        """SIGTERM: admit nothing new, let running turns finish (up to ``bound`` s)."""
        self.draining = True
        self.broadcast("gateway.draining", {"bound_s": bound})
        running = [t for t in self.runners.values() if not t.done()]
        if not running:
            return True
        _done, pending = await asyncio.wait(running, timeout=bound)
        return not pending

    def close(self) -> None:
        """Stop the turn threads (after a drain)."""
        self.pool.shutdown(wait=False, cancel_futures=True)

    # -- protocol methods ---------------------------------------------------------------------

    def _require(self, client: Client, capability: str) -> None:
        if not client.principal.can(capability):
            raise RpcError(
                p.FORBIDDEN,
                f"a {client.principal.purpose} ticket may not {capability}",
                capability=capability,
            )

    def _own(self, client: Client, session_id: str) -> None:
        if client.principal.can("own-only") and session_id not in client.created:
            raise RpcError(p.FORBIDDEN, f"a worker may only use its own sessions, not {session_id}")

    def resolve_ref(self, ref: str) -> str:
        """A session id from an id, unique prefix, title or ``latest``."""
        from hermes_es.queries.resolve import resolve_session

        try:
            return resolve_session(self._read(), ref)
        except HermesError as exc:
            raise rpc_error_for(exc) from exc

    def _target(self, client: Client, session_id: str, ref: str) -> str:
        sid = session_id or (self.resolve_ref(ref) if ref else "")
        if not sid:
            raise RpcError(p.INVALID_PARAMS, "name the session: session_id (or session)")
        self._own(client, sid)
        return sid

    def _summary(self, session_id: str, after: int) -> dict[str, Any]:
        state = q.head(self._read(), session_id)
        if state is None:
            raise RpcError(p.NOT_FOUND, f"no session {session_id!r}")
        return {
            "session_id": session_id,
            "version": state.version,
            "live_after": after,
            "title": state.title,
            "source": state.source,
            "ended": state.ended,
            "turn_state": state.turn_state,
            "queued": list(state.turn_queue),
            "running": state.turn_running,
            "unknown": list(state.turns_unknown),
            "messages": state.message_count,
        }

    async def create(self, client: Client, params: p.CreateParams) -> dict[str, Any]:
        """``session.create``."""
        self._require(client, "create")
        engine = self.engine_for(client.principal)
        cwd = params.workspace or str(Path.cwd())
        model = params.model or self.loaded.config.model.name
        leave, kind = params.leave, params.parent_kind
        if kind not in ("", "reset"):
            raise RpcError(
                p.INVALID_PARAMS,
                f"parent_kind must be 'reset' or empty, got {kind!r} (at $.parent_kind)",
            )
        parent = params.parent_id or (leave if kind else "")
        if kind and not parent:
            raise RpcError(p.INVALID_PARAMS, "parent_kind 'reset' needs parent_id or leave")
        if parent and not kind:
            raise RpcError(p.INVALID_PARAMS, "parent_id needs parent_kind (at $.parent_kind)")
        for named in {parent, leave} - {""}:
            self._own(client, named)
        create_id = params.create_id
        if create_id:
            again = self._created_before(client, create_id, leave)
            if again is not None:
                return again
        # Left as embedded mode leaves it: ended ``new_session`` (not while a turn runs or
        # waits in it); a ``/new`` also drops it when this connection made it and it is unused.
        end_it = bool(leave) and not self._busy(leave)
        drop_it = end_it and not kind and leave in client.created

        def run() -> tuple[str, bool]:
            from hermes_es.commands.discard import discard_if_unused

            sid = engine.start_session(
                params.source or "cli",
                title=params.title,
                cwd=cwd,
                model=model,
                profile=self.profile,
                user_id=client.principal.key,
                parent_id=parent,
                parent_kind=kind,
                create_id=create_id,
            )
            if end_it and not engine.get(leave).ended:
                engine.end_session(leave, "new_session")
            return sid, drop_it and discard_if_unused(engine.store, leave)

        try:
            sid, dropped = await self.write(run, alone=drop_it)
        except RpcError as exc:
            # another creation with this id committed first (a retry racing its original,
            # maybe on another gateway of the team): answer with its session
            if not create_id or not isinstance(exc.__cause__, ConflictError):
                raise
            again = self._created_before(client, create_id, leave)
            if again is None:
                raise
            return again
        client.created.add(sid)
        if leave:
            self.detach(client, leave, dropped=False)
            if dropped:
                self.chats.pop(leave, None)
                self.published.pop(leave, None)
            else:
                self.publish(leave)
        after = self.attach(client, sid)
        return {
            **self._summary(sid, after),
            "left": leave,
            "left_removed": dropped,
            "duplicate": False,
        }

    def _created_before(self, client: Client, create_id: str, leave: str) -> dict[str, Any] | None:
        """``session.create`` again with a create id that already made a session: that
        session, attached (None: the id made nothing yet). What the first creation did to
        ``leave`` was done in its transaction; here the connection only detaches from it."""
        from hermes_es.commands.create_claims import check_create_id, claim_of

        try:
            check_create_id(create_id)
        except ValidationError as exc:
            raise RpcError(p.INVALID_PARAMS, exc.message) from exc
        claim = claim_of(self._read(), create_id)
        if claim is None:
            return None
        sid, actor = claim
        if actor != client.principal.key:
            raise RpcError(
                p.REFUSED,
                f"create id {create_id!r} was used by another identity; pick a fresh one",
                create_id=create_id,
            )
        if q.head(self._read(), sid) is None:
            raise RpcError(p.NOT_FOUND, f"session {sid} made by create id {create_id!r} is gone")
        client.created.add(sid)
        if leave and leave != sid:
            self.detach(client, leave, dropped=False)
        after = self.attach(client, sid)
        return {
            **self._summary(sid, after),
            "left": leave,
            "left_removed": False,
            "duplicate": True,
        }

    async def resume(self, client: Client, params: p.ResumeParams) -> dict[str, Any]:
        """``session.resume``: by id, prefix, title, latest, or latest of a workspace."""
        self._require(client, "read")
        from hermes_es.commands.resume import pick_session

        try:
            picked = pick_session(
                self._read(),
                resume_ref=params.ref or ("latest" if not params.workspace else None),
                in_dir=params.workspace or None,
            )
        except HermesError as exc:
            raise rpc_error_for(exc) from exc
        self._own(client, picked.session_id)
        after = self.attach(client, picked.session_id)
        return {**self._summary(picked.session_id, after), "how": picked.how}

    def list_sessions(self, client: Client, params: p.ListParams) -> dict[str, Any]:
        """``session.list``."""
        self._require(client, "read")
        from hermes_es.queries.listing import list_sessions

        rows = list_sessions(self._read(), sources=params.sources or None, limit=params.limit)
        states = q.turn_states(self._read(), [r.id for r in rows])
        return {
            "sessions": [
                {**msgspec.to_builtins(r), "turn_state": states.get(r.id, "")} for r in rows
            ]
        }

    async def submit(self, client: Client, params: p.SubmitParams) -> dict[str, Any]:
        """``prompt.submit``: admit (idempotent by submission id), then run when its turn comes."""
        waiter, answered = self.admit_now(client, params)
        try:
            await waiter
        except HermesError as exc:
            raise rpc_error_for(exc) from exc
        return answered[0]

    def admit_now(
        self, client: Client, params: p.SubmitParams
    ) -> tuple[asyncio.Future[Any], list[dict[str, Any]]]:
        """``prompt.submit`` up to the writer, with no task: the admission is handed to the
        writer and its hand-back does everything that follows, the answer included
        (``Client.answer_now``, when the client reads answers in order). Returns the writer's
        waiter (an exception: nothing was admitted, the caller answers the error) and the
        list the hand-back puts the answer in. ``RpcError`` for a request refused here."""
        self._require(client, "submit")
        self._own(client, params.session_id)
        if params.client_kind not in CLIENT_KINDS:
            raise RpcError(
                p.INVALID_PARAMS,
                f"client_kind must be one of {', '.join(CLIENT_KINDS)}, got {params.client_kind!r}",
            )
        engine = self.engine_for(client.principal)
        sid = params.session_id
        if self.draining and not q.admitted_as(self._read(), sid, params.submission_id):
            raise RpcError(p.DRAINING, "the gateway is shutting down; submit again after it")

        planned = self._plan_with_admission(sid, params.text)
        epoch, actor = self.epoch, client.principal.key

        def admit() -> tuple[tuple[turns.Admission, SessionState], turn_steps.Begun | None]:
            outcome = turns.admit_with_head(
                engine,
                sid,
                submission_id=params.submission_id,
                client_kind=params.client_kind,
                text=params.text,
            )
            admission = outcome[0]
            if planned is None or admission.duplicate or admission.turn != planned.turn:
                return outcome, None
            try:  # (refused: nothing of it is stored, the admission stands; the worker runs it)
                begun = turn_steps.begin(
                    self.engine,
                    sid,
                    planned.turn,
                    epoch=epoch,
                    messages=[planned.plan.user],
                    actor=actor,
                    display_version=planned.seen,
                )
            except HermesError:
                return outcome, None
            return outcome, begun

        trace = self.trace
        if trace is not None:
            key = params.submission_id
            trace.mark(key, "received", client.received_at)
            trace.mark(key, "read", client.read_at)
            trace.mark(key, "queued")
            admit = trace.job(key, admit)
        answered: list[dict[str, Any]] = []

        def admitted(
            outcome: tuple[tuple[turns.Admission, SessionState], turn_steps.Begun | None],
        ) -> None:
            """In the writer's hand-back, on the loop: everything an admission does next,
            its answer included (written then and there: no task wake-up, no loop
            iteration waited for)."""
            (admission, head), begun = outcome
            if trace is not None:
                trace.mark(params.submission_id, "resumed")
                client.traced = params.submission_id
            if admission.turn and not admission.duplicate:
                self.admitted_by.setdefault((sid, admission.turn), client.principal.key)
                self.admitted_texts.setdefault((sid, admission.turn), params.text)
            if sid not in client.sessions:
                self.attach(client, sid)
            self._after_write(sid)
            if planned is not None and begun is not None and begun.turn:
                self._begun_with_admission(sid, planned, begun, actor)
            else:
                self._heads[sid] = head
                self.kick(sid)
            answered.append(msgspec.to_builtins(admission))
            client.answer_now(answered[0])

        # urgent: the submitter waits on this answer; turns' writes can wait
        waiter = self.engine.writer.submit_async(admit, urgent=True, pure=True, then=admitted)
        return waiter, answered

    def _plan_with_admission(self, session_id: str, text: str) -> _Planned | None:
        """The turn a submission to an idle session may start in its admission's own use case
        (the admission, the start and the user's message in one commit: one writer trip a
        turn fewer), when it would run on the loop next anyway (``_inline_turn``): the
        session's committed head is known here and nothing is queued, running or unknown
        in it, its chat is in memory and plans the turn, the responder answers this text
        without I/O; never on a team (its turn starts are fenced, its streams relayed).
        ``turn_steps.begin`` still checks, as the writer decides it, that the admitted turn
        is the next runnable one (a duplicate, another admission first, such as a second
        submission planned from the same head before the first one's hand-back: nothing
        starts, the queue worker runs it)."""
        if self.draining or self.role != "owner" or self.fenced or self.before_finish is not None:
            return None
        runner = self.runners.get(session_id)
        if runner is not None and not runner.done():
            return None
        head = self._heads.get(session_id)
        if (
            head is None
            or head.turn_queue
            or head.turn_running
            or head.turns_unknown
            or session_id not in self.subscribers
            or self.published.get(session_id) != head.version
        ):
            return None
        chat = self.chats.get(session_id)
        inline = getattr(self._responder, "answers_inline", None)
        if chat is None or inline is None or not inline(text):
            return None
        plan = chat.plan_turn(text, head)
        if plan is None:
            return None
        return _Planned(turn=head.turns_admitted + 1, chat=chat, plan=plan, seen=chat.version)

    def _begun_with_admission(
        self, session_id: str, planned: _Planned, begun: turn_steps.Begun, actor: str
    ) -> None:
        """In the admission's hand-back: its turn started in the same commit. The responder
        runs once this hand-back is done (its answers written first), then the turn's end is
        written; the session's runner is a future until that end is handed back."""
        done: asyncio.Future[None] = self.loop.create_future()
        self.runners[session_id] = done
        self._heads.pop(session_id, None)
        turn, chat = planned.turn, planned.chat
        self.admitted_by.pop((session_id, turn), None)
        self.admitted_texts.pop((session_id, turn), None)
        self.chats.move_to_end(session_id)
        if begun.transcript_moved:
            chat.reload()
        else:
            chat.recorded([planned.plan.user], begun.version)
        if begun.error:  # the session refused the message: the turn is finished, failed
            self._inline_done(session_id, done, runnable=True)
            return
        if not self._responding:  # (one callback for the turns one hand-back started)
            self.loop.call_soon(self._respond_started)
        self._responding.append((session_id, turn, chat, planned.plan.prompt, begun, actor, done))

    def _respond_started(self) -> None:
        """Once the hand-back that started them is done (its answers written): answer the
        turns it started, in the order it started them."""
        started, self._responding = self._responding, []
        for session_id, turn, chat, prompt, begun, actor, done in started:
            try:
                self._respond_inline(session_id, turn, chat, prompt, begun, actor, done)
            except Exception:  # (one turn's failure must not keep the others waiting)
                log.exception("session %s turn %d failed", session_id, turn)
                self._held.pop(session_id, None)
                self._inline_done(session_id, done, runnable=False)

    def _respond_inline(
        self,
        session_id: str,
        turn: int,
        chat: Chat,
        prompt: str,
        begun: turn_steps.Begun,
        actor: str,
        done: asyncio.Future[None],
    ) -> None:
        """The responder's answer to a turn started with its admission, then its end (as
        ``_inline_turn`` does after its ``begin``), with no task: the end's hand-back
        finishes it (``ended``; ``failed`` when the end could not be stored)."""
        self._held[session_id] = []  # (its turn.stream items go out with the end)
        dicts, error = self._answer(chat, prompt, session_id, turn)
        end = self._end_step(chat, session_id, turn, dicts, error, begun, actor)

        def ended(outcome: turn_steps.Ended) -> None:
            self._after_write(session_id)
            self._release(session_id, self.subscribers.get(session_id))
            self._held.pop(session_id, None)
            self._settle(session_id, chat, dicts, outcome)
            self._inline_done(session_id, done, runnable=bool(outcome.runnable))

        def failed(waiter: asyncio.Future[turn_steps.Ended]) -> None:
            if done.done():
                return  # ``ended`` ran
            error = "cancelled" if waiter.cancelled() else waiter.exception()
            if error is not None:
                log.error("session %s: cannot record turn %d: %s", session_id, turn, error)
            self.chats.pop(session_id, None)  # its window may hold what was not stored
            self._release(session_id, self.subscribers.get(session_id))
            self._held.pop(session_id, None)
            self._inline_done(session_id, done, runnable=False)

        try:
            waiter = self.engine.writer.submit_async(end, pure=True, then=ended)
        except RuntimeError as exc:  # the writer stopped (shut-down)
            log.error("session %s: cannot record turn %d: %s", session_id, turn, exc)
            self._held.pop(session_id, None)
            self._inline_done(session_id, done, runnable=False)
            return
        waiter.add_done_callback(failed)

    def _inline_done(self, session_id: str, done: asyncio.Future[None], *, runnable: bool) -> None:
        """A turn started with its admission is over: the next one (admitted meanwhile) gets
        a queue worker; else the session's turns are idle."""
        if not done.done():
            done.set_result(None)
        if runnable:
            self.kick(session_id)
        elif self.reaper is not None:
            self.reaper.turns_idle(session_id)

    def since(self, client: Client, params: p.SinceParams) -> dict[str, Any]:
        """``events.since``: stored events after ``last_sequence``, in order."""
        self._require(client, "read")
        self._own(client, params.session_id)
        if q.head(self._read(), params.session_id) is None:
            raise RpcError(p.NOT_FOUND, f"no session {params.session_id!r}")
        limit = max(1, min(params.limit, 10_000))
        events = q.events_since(self._read(), params.session_id, params.last_sequence, limit=limit)
        return {
            "session_id": params.session_id,
            "events": [msgspec.to_builtins(e) for e in events],
            "more": len(events) == limit,
        }

    async def cancel(self, client: Client, params: p.TurnParams) -> dict[str, Any]:
        """``turn.cancel``: a queued turn only."""
        self._require(client, "submit")
        sid = self._target(client, params.session_id, params.session)
        engine = self.engine_for(client.principal)
        state = await self.write(lambda: turns.cancel(engine, sid, params.turn))
        self.admitted_by.pop((sid, params.turn), None)
        self.admitted_texts.pop((sid, params.turn), None)
        self.publish(sid)
        return {"session_id": sid, "turn": params.turn, "queued": list(state.turn_queue)}

    async def resolve(self, client: Client, params: p.TurnParams) -> dict[str, Any]:
        """``turn.resolve``: give an unknown turn up; its followers run."""
        if not (client.principal.can("control") or client.principal.can("mutate")):
            raise RpcError(p.FORBIDDEN, f"a {client.principal.purpose} ticket may not resolve")
        sid = self._target(client, params.session_id, params.session)
        engine = self.engine_for(client.principal)
        turn = await self.write(
            lambda: turns.resolve(engine, sid, params.turn, resolution=params.resolution)
        )
        self.publish(sid)
        self.kick(sid)
        if self.reaper is not None:
            self.reaper.turns_idle(sid)
        return {"session_id": sid, "turn": turn, "resolution": params.resolution}

    async def mutate(self, client: Client, method: str, params: p.MutateParams) -> dict[str, Any]:
        """``session.rename|pin|archive|delete`` (with an optional expected version)."""
        if not (client.principal.can("control") or client.principal.can("mutate")):
            raise RpcError(p.FORBIDDEN, f"a {client.principal.purpose} ticket may not {method}")
        sid = self._target(client, params.session_id, params.session)
        engine = self.engine_for(client.principal)
        expected = params.expected_version

        def check() -> None:
            state = engine.get(sid)
            if expected is not None and state.version != expected:
                raise ConflictError(
                    f"session {sid} is at version {state.version}, not {expected}",
                    subject=sid,
                    expected=expected,
                    actual=state.version,
                )

        if method == "session.delete":
            return await self._delete(client, [sid], check=check, reason="delete")

        def run() -> list[str]:
            from hermes_es.commands import archive as arch

            check()
            if method == "session.rename":
                engine.set_title(sid, params.title)
                return [sid]
            if method == "session.pin":  # through the live tip; unpin clears every segment
                return arch.pin_sessions(engine, [sid], params.pinned)
            if not params.archived:
                return arch.unarchive_sessions(engine, [sid])
            if params.reason == "sweep":
                engine.archive(sid, "sweep")
                return [sid]
            return arch.archive_sessions(engine, [sid])

        changed = await self.write(run)
        for each in {sid, *changed}:
            self.publish(each)
        state = q.head(self._read(), sid)
        return {
            "session_id": sid,
            "changed": changed,
            "version": state.version if state else 0,
            "title": state.title if state else "",
        }

    async def delete_many(self, client: Client, params: p.DeleteManyParams) -> dict[str, Any]:
        """``sessions.delete``: what ``hermes sessions prune`` selected."""
        self._require(client, "mutate")
        return await self._delete(client, params.session_ids, reason=params.reason)

    async def _delete(
        self,
        client: Client,
        session_ids: list[str],
        *,
        reason: str,
        check: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        from hermes_es.commands.delete import delete_many

        busy = [s for s in session_ids if self._busy(s)]
        if busy:
            raise RpcError(
                p.REFUSED,
                f"session {busy[0]} has a turn running, queued or unknown; it cannot be deleted"
                " now",
                sessions=busy,
            )
        engine = self.engine_for(client.principal)
        kept: list[str] = []
        if reason == "prune":  # re-check what the prune planned: still ended and unpinned
            for sid in session_ids:
                state = q.head(self._read(), sid)
                if state is not None and (not state.ended or state.pinned):
                    kept.append(sid)
            session_ids = [s for s in session_ids if s not in kept]

        def run() -> Any:
            if check is not None:
                check()
            if not session_ids:
                return []
            return delete_many(engine.store, session_ids, reason=reason, actor=engine.actor)

        done = await self.write(run, alone=True)
        for sid in session_ids:
            self.chats.pop(sid, None)
            self.published.pop(sid, None)
            self._heads.pop(sid, None)
        return {
            "deleted": [d.session_id for d in done],
            "messages": sum(d.messages for d in done),
            "scrubbed": all(d.scrubbed for d in done),
            "kept": kept,
        }

    def _busy(self, session_id: str) -> bool:
        state = q.head(self._read(), session_id)
        return bool(state and (state.turn_running or state.turn_queue or state.turns_unknown))

    async def close_session(self, client: Client, params: p.SessionParams) -> dict[str, Any]:
        """``session.close``: the client ends the session (user exit) and detaches."""
        self._require(client, "control")
        sid = params.session_id
        self._own(client, sid)
        if params.reason not in ("user_exit", "run_complete", "switched"):
            raise RpcError(p.INVALID_PARAMS, "reason must be user_exit, run_complete or switched")
        engine = self.engine_for(client.principal)
        removed = False
        if not self._busy(sid):
            # as embedded mode: a session this connection opened and left unused is removed
            drop = sid in client.created and params.reason != "switched"

            def run() -> bool:
                from hermes_es.commands.discard import discard_if_unused

                if not engine.get(sid).ended:
                    engine.end_session(sid, params.reason)
                return drop and discard_if_unused(engine.store, sid)

            removed = await self.write(run, alone=drop)
            if not removed:
                self.publish(sid)
        self.detach(client, sid, dropped=False)
        if removed:
            self.chats.pop(sid, None)
            self.published.pop(sid, None)
        return {"session_id": sid, "ended": not self._busy(sid) or removed, "removed": removed}

    async def dispatch(self, client: Client, request: p.Request) -> Any:
        """Run one method; returns its result or raises ``RpcError``."""
        method = request.method
        spec = METHODS.get(method)
        if spec is None:
            raise RpcError(p.METHOD_NOT_FOUND, f"unknown method {method!r}")
        standby_write = self.role == "standby" and method in STANDBY_WRITES
        if self.role != "owner" and method not in READ_METHODS and not standby_write:
            raise self.not_owner(method)
        try:
            params = msgspec.convert(request.params, spec, str_keys=True)
        except msgspec.ValidationError as exc:
            raise RpcError(p.INVALID_PARAMS, f"invalid params for {method}: {exc}") from exc
        try:
            result = await self._call(client, method, params)
        except HermesError as exc:
            raise rpc_error_for(exc) from exc
        if standby_write and method in ("prompt.submit", "turn.resolve"):
            self.on_standby_write(str(result["session_id"]))
        return result

    def admit_request(
        self, client: Client, request: p.Request
    ) -> tuple[asyncio.Future[Any], list[dict[str, Any]]] | None:
        """``prompt.submit`` on an owner with no task (``admit_now``: the writer's waiter and
        the list its hand-back puts the answer in), or None when ``dispatch`` must run it (a
        standby). ``RpcError`` as ``dispatch`` raises it for a request refused before the
        writer."""
        if self.role != "owner":
            return None
        try:
            params = msgspec.convert(request.params, p.SubmitParams, str_keys=True)
        except msgspec.ValidationError as exc:
            raise RpcError(p.INVALID_PARAMS, f"invalid params for {request.method}: {exc}") from exc
        try:
            return self.admit_now(client, params)
        except HermesError as exc:
            raise rpc_error_for(exc) from exc

    async def _call(self, client: Client, method: str, params: Any) -> Any:
        if method == "session.create":
            return await self.create(client, params)
        if method == "session.resume":
            return await self.resume(client, params)
        if method == "session.list":
            return self.list_sessions(client, params)
        if method == "session.detach":
            self.detach(client, params.session_id, dropped=False)
            return {"session_id": params.session_id}
        if method == "session.close":
            return await self.close_session(client, params)
        if method == "prompt.submit":
            return await self.submit(client, params)
        if method == "events.since":
            return self.since(client, params)
        if method == "turn.cancel":
            return await self.cancel(client, params)
        if method == "turn.resolve":
            return await self.resolve(client, params)
        if method == "sessions.delete":
            return await self.delete_many(client, params)
        if method == "gateway.status":
            return self.status()
        return await self.mutate(client, method, params)

    def not_owner(self, method: str) -> RpcError:
        """The answer of a standby to an execution method: where the live owner is."""
        owner = self.owner_hint()
        if owner is None:
            where = "no owner is live right now (a takeover is under way); retry in a moment"
        else:
            where = (
                f"the owner is gateway {owner['instance_id']} on host {owner['hostname']}"
                f" at {owner['url']} (epoch {owner['epoch']})"
            )
        return RpcError(
            p.NOT_OWNER,
            f"this gateway is a {self.role} and does not run {method}; {where}",
            role=self.role,
            owner=owner,
        )

    def status(self) -> dict[str, Any]:
        """``gateway.status``."""
        return {
            "role": self.role,
            "epoch": self.epoch,
            "pid": os.getpid(),
            "draining": self.draining,
            "attached_sessions": len(self.subscribers),
            "running_turns": sum(1 for t in self.runners.values() if not t.done()),
            "writer_groups": self.engine.writer.groups,
            "writer_jobs": self.engine.writer.jobs,
            "time": time.time(),
            **self.status_extra(),
        }


READ_METHODS = frozenset(
    ("session.resume", "session.list", "session.detach", "events.since", "gateway.status")
)
"""What a standby serves itself (everything else runs on the owner)."""

STANDBY_WRITES = frozenset(
    (
        "session.create",
        "session.close",
        "prompt.submit",
        "turn.resolve",
        "turn.cancel",
        "session.rename",
    )
)
"""What a standby also accepts: writes through the shared store's version checks that start
nothing (a submission is admitted to the log; the owner, told through the team relay, runs
it). Deletes and the other mutations stay the owner's."""


class _Planned:
    """A turn to start in its admission's use case (``_plan_with_admission``)."""

    __slots__ = ("chat", "plan", "seen", "turn")

    def __init__(self, *, turn: int, chat: Chat, plan: TurnPlan, seen: int) -> None:
        self.turn = turn
        self.chat = chat
        self.plan = plan
        self.seen = seen
        """The chat's version when it planned (the begin's ``display_version``)."""


class _NoParams(msgspec.Struct, frozen=True):
    """Methods without params."""


METHODS: dict[str, type[msgspec.Struct]] = {
    "session.create": p.CreateParams,
    "session.resume": p.ResumeParams,
    "session.list": p.ListParams,
    "session.detach": p.SessionParams,
    "session.close": p.SessionParams,
    "prompt.submit": p.SubmitParams,
    "events.since": p.SinceParams,
    "turn.cancel": p.TurnParams,
    "turn.resolve": p.TurnParams,
    "session.rename": p.MutateParams,
    "session.pin": p.MutateParams,
    "session.archive": p.MutateParams,
    "session.delete": p.MutateParams,
    "sessions.delete": p.DeleteManyParams,
    "gateway.status": _NoParams,
}
"""Every method and the Struct its params decode into."""
