"""The gateway's ASGI app: one factory builds the routes; the lifespan owns start-up and shut-down.

Routes: ``/ws`` (JSON-RPC 2.0 over a WebSocket; a ticket of purpose interactive or worker in
the ``ticket`` query parameter, checked before the handshake is accepted), ``POST /rpc`` (one
JSON-RPC call with a native-http ticket as ``Authorization: Bearer``), ``GET /healthz``.

Start-up (lifespan): open the group-commit engine on the profile's configured store (SQLite
state.db or PostgreSQL, resolved like every command's), register as the profile's ``gateway``
holder, begin a new epoch, record started-unfinished turns as unknown, run the startup orphan
sweep, start the reaper; then clients are accepted. Shut-down: stop the reaper, the turn
threads, the writer and the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from hermes_es.errors import HermesError
from hermes_es.gateway import protocol as p
from hermes_es.gateway.authority import Client, RpcError, SessionAuthority, rpc_error_for
from hermes_es.gateway.connection import Requests
from hermes_es.gateway.identity import CLIENT_KINDS
from hermes_es.gateway.outbox import GONE, Outbox, run_eagerly
from hermes_es.gateway.tickets import TicketBook, TicketError
from hermes_es.gateway.trace import RECEIVED
from hermes_es.gateway.wire import READ_AHEAD

if TYPE_CHECKING:
    from hermes_es.commands.group_engine import GroupCommitEngine
    from hermes_es.gateway.ownership import Team

log = logging.getLogger("hermes.gateway")

SEND_QUEUE = 10_000
"""Frames a slow client may fall behind before it is disconnected (it can replay later)."""


class GatewayState:
    """What the lifespan builds and the routes use."""

    def __init__(
        self, *, home: Path, profile: str, instance_id: str, store: str | None = None
    ) -> None:
        self.home = home
        self.profile = profile
        self.store = store
        """``--store`` as given (else $HERMES_STORE_URL, config.yaml ``store.url``, state.db)."""
        self.instance_id = instance_id
        self.tickets = TicketBook()
        self.authority: SessionAuthority | None = None
        self.epoch = 0
        self.ready = asyncio.Event()
        self.recovered: list[tuple[str, int]] = []
        self.swept: list[str] = []
        self.warnings: list[str] = []
        self.location = ""
        """Where the store is (a path, or a URL without its password), once opened."""
        self.engine: GroupCommitEngine | None = None
        self.store_url: str | None = None
        """The PostgreSQL store's URL once opened (None on SQLite): the team's database."""
        self.team: Team | None = None
        """This gateway's role in its profile's team (``ownership.py``)."""
        self.lost = asyncio.Event()
        """Set when an owner lost its ownership lock (the process then exits)."""

    def open_engine(self) -> GroupCommitEngine:
        """Open the group-commit engine on the profile's configured store, resolved as every
        command resolves it (``--store``, $HERMES_STORE_URL, config.yaml, else state.db).

        Holder leases stay beside the profile's state.db path whatever the store, so
        optimize and embedded prune still see the gateway's hold. Every failure is a
        ``HermesError`` naming the store (a URL without its password).
        """
        from hermes_es.commands.group_engine import GroupCommitEngine
        from hermes_es.errors import HermesError, StoreError
        from hermes_es.home import profile_dir
        from hermes_es.store.backend import open_backend, redact_url, resolve_target

        directory = profile_dir(self.home, self.profile)
        directory.mkdir(parents=True, exist_ok=True)
        db_path = directory / "state.db"
        target = resolve_target(db_path, directory / "config.yaml", option=self.store)
        shown = redact_url(target) if isinstance(target, str) else str(target)
        try:
            backend = open_backend(target, lease_path=db_path)
            self.location = backend.location
            self.store_url = getattr(backend, "url", None) if backend.kind == "postgresql" else None
            self.engine = GroupCommitEngine(
                backend, actor="gateway", max_message_bytes=self._message_limit()
            )
        except HermesError:
            raise
        except Exception as exc:  # SQLite, PostgreSQL or OS errors
            raise StoreError(
                f"the gateway cannot open the session store {shown}: {exc}", subject=shown
            ) from exc
        return self.engine

    def _message_limit(self) -> int:
        """``sessions.max_message_bytes`` of the profile (its default when config.yaml is
        unreadable: start-up reports a broken config itself)."""
        from hermes_es.aggregates.validation import DEFAULT_MAX_MESSAGE_BYTES
        from hermes_es.config import load_profile_config
        from hermes_es.errors import HermesError

        try:
            limit = load_profile_config(self.home, self.profile).config.sessions.max_message_bytes
        except HermesError:
            return DEFAULT_MAX_MESSAGE_BYTES
        return int(limit)


def create_app(state: GatewayState) -> Starlette:
    """The gateway app for one profile."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from hermes_es.commands import turns
        from hermes_es.commands.holders import held_sessions, register_holder
        from hermes_es.config import load_profile_config
        from hermes_es.gateway.ownership import Team
        from hermes_es.gateway.reaper import Reaper
        from hermes_es.gateway.trace import AdmissionTrace
        from hermes_es.home import profile_dir

        directory = profile_dir(state.home, state.profile)
        directory.mkdir(parents=True, exist_ok=True)
        loaded = load_profile_config(state.home, state.profile)
        engine = state.engine or state.open_engine()
        holder = contextlib.ExitStack()
        try:
            holder.enter_context(register_holder(engine.db_path, "gateway"))
            authority = SessionAuthority(
                engine, loaded=loaded, profile=state.profile, profile_dir=directory, epoch=0
            )
            authority.role = "standby"  # until it owns the profile (at once, unless a team's)
            authority.trace = AdmissionTrace.from_env()
            if authority.trace is not None:
                authority.trace.watch(engine.writer.store)
            state.authority = authority
            cfg = loaded.config

            async def promote() -> None:
                """Own the profile: a new epoch, recovery, the orphan sweep and the reaper."""
                epoch = await asyncio.to_thread(
                    engine.writer.call,
                    lambda: turns.begin_epoch(
                        engine, state.profile, instance_id=state.instance_id, pid=os.getpid()
                    ),
                )
                state.epoch = authority.epoch = epoch
                reaper = Reaper(
                    authority,
                    grace_s=float(cfg.sessions.orphan_end_grace_s),
                    enabled=cfg.dashboard.ws_orphan_reap_grace_s > 0,
                )
                authority.reaper = reaper
                authority.role = "owner"
                state.recovered = await authority.recover()
                if cfg.dashboard.startup_orphan_sweep:  # (a standby's attached ones are viewed)
                    held = held_sessions(engine.db_path) | set(authority.subscribers)
                    state.swept = await reaper.startup_sweep(held)

            state.team = Team(
                authority,
                profile=state.profile,
                instance_id=state.instance_id,
                url=state.store_url,
                on_lost=state.lost.set,
            )
            await state.team.start(promote)
            state.ready.set()
            yield
        finally:
            if state.team is not None:
                await state.team.stop()
            authority_ = state.authority
            if authority_ is not None:
                if authority_.reaper is not None:
                    authority_.reaper.stop()
                authority_.close()
                if authority_.trace is not None:
                    authority_.trace.dump()
            holder.close()
            await asyncio.to_thread(engine.close)

    async def healthz(request: Request) -> Response:
        authority = state.authority
        body: dict[str, Any] = {"ok": authority is not None, "instance_id": state.instance_id}
        if authority is not None:
            body.update(authority.status())
        if state.team is not None:
            body["role"] = state.team.role
        return JSONResponse(body)

    async def rpc(request: Request) -> Response:
        authority = state.authority
        if authority is None:
            return JSONResponse({"error": "starting"}, status_code=503)
        auth = request.headers.get("authorization", "")
        token = auth[7:] if auth.lower().startswith("bearer ") else None
        try:
            principal = state.tickets.redeem(token, purposes=("native-http",))
        except TicketError as exc:
            return JSONResponse({"error": str(exc)}, status_code=401)
        body = await request.body()
        response = await _answer(authority, Client(principal, "http", _discard), body)
        if response is None:
            return Response(status_code=204)
        return Response(p.encode(response), media_type="application/json")

    async def ws(websocket: WebSocket) -> None:
        authority = state.authority
        try:
            principal = state.tickets.redeem(
                websocket.query_params.get("ticket"), purposes=("interactive", "worker")
            )
        except TicketError as exc:
            await websocket.close(code=4401, reason=str(exc)[:120])
            return
        if authority is None:
            await websocket.close(code=1013, reason="gateway starting")
            return
        kind = websocket.query_params.get("client", "cli")
        if kind not in CLIENT_KINDS:
            kind = "cli"
        await websocket.accept()
        trace = authority.trace

        def gone() -> None:
            client.closed = True

        outbox = Outbox(
            websocket,
            limit=SEND_QUEUE,
            on_gone=gone,
            on_written=trace.written if trace is not None else None,
        )
        client = Client(principal, kind, outbox.send, outbox.send_all)
        if trace is not None:
            client.on_answer = trace.answer

        async def answer(body: bytes) -> None:
            """Run one request and write its answer (unless the writer's hand-back did)."""
            response = await _answer(authority, client, body)
            if client.answered is not None and client.answered == client.request_id:
                client.answered = client.request_id = None  # answered from the hand-back
                return
            client.request_id = None
            if response is not None:
                frame = p.encode(response)
                if trace is not None and client.traced:
                    trace.answer(client.traced, frame)
                    client.traced = ""
                outbox.send(frame)

        def run(body: bytes, done: Callable[[], None]) -> bool:
            """Run one request (``connection.Requests``): ``prompt.submit`` on an owner with no
            task (answered from the writer's hand-back, ``admit_request``), anything else as a
            coroutine up to its first suspension; True when it is done now."""
            request = _submit_request(body)
            if request is not None:
                client.request_id = request.id
                try:
                    handed = authority.admit_request(client, request)
                except RpcError as exc:
                    client.request_id = None
                    outbox.send(p.encode(p.error(request.id, exc.code, exc.message, **exc.data)))
                    return True
                except Exception as exc:  # (as ``_answer`` answers an unexpected failure)
                    log.exception("method %s failed", request.method)
                    client.request_id = None
                    outbox.send(
                        p.encode(p.error(request.id, p.INTERNAL_ERROR, f"internal error: {exc}"))
                    )
                    return True
                if handed is not None:
                    waiter, answered = handed
                    waiter.add_done_callback(lambda w: admitted(request, w, answered, done))
                    return False
                client.request_id = None
            task = run_eagerly(answer(body))
            if task is None:
                return True
            task.add_done_callback(lambda _: done())
            return False

        def admitted(
            request: p.Request,
            waiter: asyncio.Future[Any],
            answered: list[dict[str, Any]],
            done: Callable[[], None],
        ) -> None:
            """An admission handed to the writer is over: answered by its hand-back, or failed
            (nothing admitted: the error is the answer)."""
            failure = None if waiter.cancelled() else waiter.exception()
            client.request_id = client.answered = None
            if failure is None and not answered:  # committed, but its hand-back failed early
                result = msgspec.to_builtins(waiter.result()[0][0])
                outbox.send(p.encode(p.Response(id=request.id, result=result)))
            elif failure is not None:
                if isinstance(failure, HermesError):
                    error = rpc_error_for(failure)
                    response = p.error(request.id, error.code, error.message, **error.data)
                else:
                    log.error("method %s failed", request.method, exc_info=failure)
                    response = p.error(request.id, p.INTERNAL_ERROR, f"internal error: {failure}")
                outbox.send(p.encode(response))
            done()

        def stamp() -> None:
            assert trace is not None
            client.read_at = trace.now()
            client.received_at = websocket.scope.get(RECEIVED, client.read_at)

        wire = outbox.wire
        try:
            if wire is None:  # (another server's protocol: every message through ASGI)
                while True:
                    message = await websocket.receive_text()
                    if trace is not None:
                        stamp()
                    await answer(message.encode())
            # The gateway's protocol hands each request straight to ``requests`` (answered in
            # order); this handler only waits for the disconnect.
            requests = Requests(
                run,
                read_ahead=READ_AHEAD,
                pause=wire.pause_requests,
                resume=wire.resume_requests,
                on_read=stamp if trace is not None else None,
            )
            wire.take_requests(requests.feed)
            try:
                while (await websocket.receive())["type"] != "websocket.disconnect":
                    # a binary message: not a JSON-RPC request (text frames only)
                    await websocket.close(code=1003, reason="text frames only")
            finally:
                wire.reader = None
            await requests.drained()  # what was received before the disconnect runs first
        except GONE:
            pass
        finally:
            authority.disconnect(client)
            outbox.close()

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/rpc", rpc, methods=["POST"]),
            WebSocketRoute("/ws", ws),
        ],
        lifespan=lifespan,
    )


def _submit_request(body: bytes) -> p.Request | None:
    """The request in ``body`` when it is a well-formed ``prompt.submit`` call (None for
    anything else: ``_answer`` decodes, dispatches or refuses it)."""
    if b'"prompt.submit"' not in body:
        return None
    try:
        request = p.REQUEST_DECODER.decode(body)
    except msgspec.DecodeError:
        return None
    if request.jsonrpc != "2.0" or request.method != "prompt.submit" or request.id is None:
        return None
    return request


def _discard(_: bytes) -> None:
    """HTTP callers get no pushed events."""


async def _answer(authority: SessionAuthority, client: Client, body: bytes) -> p.Response | None:
    """Decode one request, run it, and build its response (None for a notification)."""
    try:
        request = p.REQUEST_DECODER.decode(body)
    except msgspec.DecodeError as exc:
        code = p.PARSE_ERROR if "JSON" in str(exc) else p.INVALID_REQUEST
        return p.error(None, code, f"bad request: {exc}")
    if request.jsonrpc != "2.0":
        return p.error(request.id, p.INVALID_REQUEST, "jsonrpc must be '2.0'")
    client.request_id = request.id
    try:
        result = await authority.dispatch(client, request)
    except RpcError as exc:
        return p.error(request.id, exc.code, exc.message, **exc.data)
    except Exception as exc:
        log.exception("method %s failed", request.method)
        return p.error(request.id, p.INTERNAL_ERROR, f"internal error: {exc}")
    if request.id is None:
        return None
    return p.Response(id=request.id, result=result)
