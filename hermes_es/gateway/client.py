"""The client side the CLI uses: find a running gateway, get a ticket, call it over WS or HTTP."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from hermes_es.commands.holders import pid_alive
from hermes_es.errors import HermesError
from hermes_es.gateway.control import ControlError, request_ticket
from hermes_es.gateway.paths import Endpoint, GatewayPaths, lock_holder, read_endpoint

NO_GATEWAY_ENV = "HERMES_NO_GATEWAY"
"""Set to 1 to run embedded even while a gateway runs (the store is then shared)."""


class GatewayError(HermesError):
    """The gateway answered an error, or could not be reached."""

    def __init__(self, message: str, *, code: int = 0, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data or {}


class GatewayDropped(GatewayError):
    """The connection to the gateway dropped."""


class GatewayHandle:
    """A running gateway of a profile, as ``gateway.json`` and the control socket show it."""

    def __init__(self, paths: GatewayPaths, endpoint: Endpoint) -> None:
        self.paths = paths
        self.endpoint = endpoint

    def ticket(self, purpose: str) -> str:
        """A fresh single-use ticket from the control socket."""
        if not self.paths.socket.exists():
            profile = self.endpoint.profile
            command = (
                "hermes gateway" if profile in ("", "default") else f"hermes -p {profile} gateway"
            )
            raise GatewayError(
                f"the gateway (pid {self.endpoint.pid}) runs but its control socket"
                f" {self.paths.socket} is missing, so nothing can attach to it (and nothing"
                f" may write the store beside it); restart it: {command} stop, then"
                f" {command} start"
            )
        try:
            return str(request_ticket(self.paths.socket, purpose)["ticket"])
        except ControlError as exc:
            raise GatewayError(str(exc)) from exc

    def http_call(self, method: str, params: dict[str, Any], *, timeout: float = 120.0) -> Any:
        """One JSON-RPC call over HTTP with a native-http ticket."""
        import httpx

        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        try:
            response = httpx.post(
                f"{self.endpoint.http_url}/rpc",
                json=body,
                headers={"Authorization": f"Bearer {self.ticket('native-http')}"},
                timeout=timeout,
            )
        except httpx.HTTPError as exc:
            raise GatewayError(f"the gateway at {self.endpoint.http_url} failed: {exc}") from exc
        if response.status_code != 200:
            raise GatewayError(
                f"the gateway refused the call ({response.status_code}): {response.text[:200]}"
            )
        return _result(response.json())

    def connect(self, client_kind: str = "cli", *, purpose: str = "interactive") -> Connection:
        """A WebSocket connection authenticated with a fresh ticket."""
        return Connection.open(self, client_kind, purpose=purpose)


STARTING_WAIT_S = 30.0
"""How long a CLI command waits for a gateway that holds the profile but has not published
``gateway.json`` yet (it is recovering), rather than write the store beside it."""


def running_gateway(profile_dir: Path, *, starting_wait: float = 0.0) -> GatewayHandle | None:
    """The gateway running for the profile, or None (also when ``HERMES_NO_GATEWAY=1``).

    The gateway is the process holding the profile's lock. One that holds it without having
    published ``gateway.json`` yet (starting: recovery, the sweep) is waited for up to
    ``starting_wait`` seconds; after that (or at once, with 0) this is a GatewayError when
    waiting was asked for, None otherwise.
    """
    if os.environ.get(NO_GATEWAY_ENV, "") not in ("", "0"):
        return None
    paths = GatewayPaths(profile_dir)
    deadline = time.monotonic() + starting_wait
    while True:
        endpoint = read_endpoint(paths)
        holder = lock_holder(paths)
        if holder is None:  # this system cannot tell who holds the lock: a live pid and a socket
            if endpoint is None or not pid_alive(endpoint.pid) or not paths.socket.exists():
                return None
            return GatewayHandle(paths, endpoint)
        if endpoint is not None and holder == endpoint.pid:
            # It runs, even if its control socket went missing: asking it for a ticket then
            # fails, naming the socket, rather than the caller writing the store beside it.
            return GatewayHandle(paths, endpoint)
        if not holder or not pid_alive(holder) or starting_wait <= 0:
            return None  # none runs (a gateway.json left is a crashed one's)
        if time.monotonic() >= deadline:
            raise GatewayError(
                f"a gateway (pid {holder}) holds this profile but did not become ready within"
                f" {starting_wait:.0f} s (its log: {paths.log})"
            )
        time.sleep(0.05)


def _result(message: dict[str, Any]) -> Any:
    error = message.get("error")
    if error:
        raise GatewayError(
            str(error.get("message", "gateway error")),
            code=int(error.get("code", 0)),
            data=error.get("data") or {},
        )
    return message.get("result")


class Connection:
    """One JSON-RPC WebSocket connection (blocking; the CLI's side of the protocol)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self.pending: list[dict[str, Any]] = []
        """Notifications received while waiting for a response."""
        self._reader: threading.Thread | None = None
        self._waiting: dict[int, Future[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.dropped = threading.Event()

    def start_reader(self, on_notification: Callable[[dict[str, Any]], None]) -> None:
        """Read every frame on a thread from now on: notifications go to ``on_notification``
        (on that thread), responses to the ``call`` waiting for them."""

        def run() -> None:
            from websockets.exceptions import ConnectionClosed

            try:
                while True:
                    message = json.loads(self.ws.recv())
                    future = None
                    if "id" in message and "method" not in message:
                        with self._lock:
                            future = self._waiting.pop(message["id"], None)
                    if future is not None:
                        future.set_result(message)
                    elif "method" in message:
                        on_notification(message)
            except (ConnectionClosed, OSError, ValueError):
                pass
            finally:
                self.dropped.set()
                with self._lock:
                    waiting, self._waiting = self._waiting, {}
                for future in waiting.values():
                    future.set_exception(GatewayDropped("the connection to the gateway dropped"))
                on_notification({"method": "connection.dropped", "params": {}})

        for message in self.pending:
            on_notification(message)
        self.pending.clear()
        self._reader = threading.Thread(target=run, name="hermes-gateway-reader", daemon=True)
        self._reader.start()

    @classmethod
    def open(cls, handle: GatewayHandle, client_kind: str, *, purpose: str) -> Connection:
        from websockets.exceptions import InvalidStatus, WebSocketException
        from websockets.sync.client import connect

        ticket = handle.ticket(purpose)
        url = f"{handle.endpoint.ws_url}?ticket={ticket}&client={client_kind}"
        try:
            ws = contextlib.ExitStack().enter_context(connect(url, open_timeout=10, max_size=2**24))
        except InvalidStatus as exc:
            raise GatewayError(f"the gateway refused the connection: {exc}") from exc
        except (OSError, WebSocketException) as exc:
            raise GatewayError(f"cannot connect to the gateway: {exc}") from exc
        return cls(ws)

    def close(self, *, wait: float = 0.0) -> None:
        """Close the connection (attached sessions are only detached); ``wait``: up to that
        many seconds for the reader thread to have reported the drop."""
        self.ws.close()
        reader = self._reader
        if wait and reader is not None and reader is not threading.current_thread():
            reader.join(wait)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _recv(self, timeout: float | None) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        try:
            raw = self.ws.recv(timeout=timeout)
        except ConnectionClosed as exc:
            raise GatewayDropped("the connection to the gateway dropped") from exc
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send a call and wait for its response (notifications meanwhile are kept)."""
        from websockets.exceptions import ConnectionClosed

        request_id = next(self._ids)
        frame = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
        future: Future[dict[str, Any]] | None = None
        if self._reader is not None:
            future = Future()
            with self._lock:
                if self.dropped.is_set():
                    raise GatewayDropped("the connection to the gateway dropped")
                self._waiting[request_id] = future
        try:
            self.ws.send(json.dumps(frame))
        except ConnectionClosed as exc:
            raise GatewayDropped("the connection to the gateway dropped") from exc
        if future is not None:
            return _result(future.result())
        while True:
            message = self._recv(None)
            if message.get("id") == request_id:
                return _result(message)
            if "method" in message:
                self.pending.append(message)

    def notifications(self, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Pushed notifications, kept ones first; stops after ``timeout`` s of silence."""
        while self.pending:
            yield self.pending.pop(0)
        while True:
            try:
                message = self._recv(timeout)
            except TimeoutError:
                return
            if "method" in message:
                yield message

    def wait_turn(
        self,
        session_id: str,
        turn: int,
        *,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        on_stream: Callable[[dict[str, Any]], None] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Follow the session's stream until ``turn`` finishes (or is unknown); its final event.

        ``on_event`` hears each stored event, ``on_stream`` each live ``turn.stream`` item.
        """
        for message in self.notifications(timeout):
            params = message.get("params") or {}
            if params.get("session_id") != session_id:
                continue
            if message.get("method") == "turn.stream":
                if on_stream is not None:
                    on_stream(params)
                continue
            if message.get("method") != "session.event":
                continue
            if on_event is not None:
                on_event(params)
            event = params.get("event") or {}
            if params.get("type") in ("hermes.turn.finished", "hermes.turn.unknown") and (
                event.get("turn") == turn
            ):
                return params
        raise GatewayError(f"turn {turn} did not finish within {timeout} s")
