"""A connection's outgoing frames: written at once, in order, by whoever sends them.

Every frame goes through Starlette's and uvicorn's ``send``, which are coroutines but only
suspend while the socket's buffer is full (uvicorn waits for the transport to drain). So
``Outbox.send`` runs that coroutine at once, up to its first suspension (what Python 3.12's
eager tasks do, ``run_eagerly``): a plain callback such as the writer's commit hand-back or
the fan-out puts the frame on the wire then and there, with no task woken for it and no
loop iteration waited for. Only when a write does suspend does a task finish it; frames
sent meanwhile wait behind it in the backlog, and go out in order once it is done. A
client whose backlog passes ``limit`` frames is disconnected (it can replay later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import types
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from hermes_es.gateway.wire import WIRE

log = logging.getLogger("hermes.gateway")

GONE = (WebSocketDisconnect, RuntimeError, OSError)
"""What a write to a connection that has gone away raises (uvicorn's ClientDisconnected is
an OSError; Starlette raises RuntimeError once a close was sent)."""


def run_eagerly(coro: Coroutine[Any, Any, None]) -> asyncio.Future[None] | None:
    """Run ``coro`` now; None when it finished without suspending, else the task that
    finishes it. An exception raised before its first suspension propagates."""
    try:
        waiting = coro.send(None)
    except StopIteration:
        return None
    return asyncio.ensure_future(_resume(coro, waiting))


@types.coroutine
def _resume(coro: Coroutine[Any, Any, None], waiting: Any) -> Generator[Any, Any, None]:
    """Go on with ``coro``, which suspended on ``waiting`` (a future): each value or
    exception the task sends in is passed on to it."""
    while True:
        try:
            value = yield waiting
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                waiting = coro.throw(exc)
            except StopIteration:
                return
        else:
            try:
                waiting = coro.send(value)
            except StopIteration:
                return


class Outbox:
    """The frames of one WebSocket connection."""

    def __init__(
        self,
        websocket: WebSocket,
        *,
        limit: int,
        on_gone: Callable[[], None],
        on_written: Callable[[bytes], None] | None = None,
    ) -> None:
        self.websocket = websocket
        self.limit = limit
        self.on_gone = on_gone
        """Called once the connection cannot take frames any more (gone, or too far behind)."""
        self.on_written = on_written
        self.backlog: deque[bytes] = deque()
        self.waiting: asyncio.Future[None] | None = None
        """The write that had to wait for the socket, while it waits."""
        self.gone = False
        self._closing: asyncio.Future[None] | None = None
        self.wire = websocket.scope.get(WIRE)
        """The connection's ``wire.GatewayWebSocketProtocol`` (None on another server)."""

    def send(self, frame: bytes) -> None:
        """Write ``frame`` now, or behind the write that is waiting for the socket."""
        if self.gone:
            return
        if self.waiting is not None:
            if len(self.backlog) >= self.limit:
                log.warning("client fell %d frames behind; disconnecting it", self.limit)
                self._give_up(close=True)
                return
            self.backlog.append(frame)
            return
        self._write(frame)

    def send_all(self, frames: list[bytes]) -> None:
        """``send`` each of ``frames``, in order (the connection checked once for all of
        them while it can take them straight away)."""
        if self.gone:
            return
        wire = self.wire
        if self.waiting is None and wire is not None:
            written = wire.send_text_frames(frames)
            if self.on_written is not None:
                for frame in frames[:written]:
                    self.on_written(frame)
            if written == len(frames):
                return
            frames = frames[written:]
        for frame in frames:
            self.send(frame)

    def _write(self, frame: bytes) -> None:
        wire = self.wire
        if wire is not None and wire.send_text_frame(frame):
            if self.on_written is not None:
                self.on_written(frame)
            return
        try:
            waiting = run_eagerly(self.websocket.send_text(frame.decode()))
        except GONE:
            self._give_up(close=False)
            return
        if self.on_written is not None:
            self.on_written(frame)
        if waiting is not None:
            self.waiting = waiting
            waiting.add_done_callback(self._done_waiting)

    def _done_waiting(self, waited: asyncio.Future[None]) -> None:
        self.waiting = None
        if waited.cancelled() or waited.exception() is not None:
            self._give_up(close=False)
            return
        while self.backlog and self.waiting is None and not self.gone:
            self._write(self.backlog.popleft())

    def _give_up(self, *, close: bool) -> None:
        if self.gone:
            return
        self.gone = True
        self.backlog.clear()
        self.on_gone()
        if close and self._closing is None:  # the reader then sees the disconnect
            self._closing = asyncio.ensure_future(self._close())

    async def _close(self) -> None:
        with contextlib.suppress(*GONE):  # (after the write still waiting, if any)
            await self.websocket.close(code=1013)

    def close(self) -> None:
        """The connection ended: drop what is waiting."""
        self.gone = True
        self.backlog.clear()
        for task in (self.waiting, self._closing):
            if task is not None:
                task.cancel()
