"""A WebSocket connection's requests: taken from the gateway's protocol as they arrive, answered
one at a time, in order.

The gateway's WebSocket protocol (``wire.GatewayWebSocketProtocol``) hands each text message
here (``Requests.feed``) as it parses it, instead of queueing it for the ASGI app to read
(uvicorn's queue, then Starlette's ``receive``, each message waking the connection's handler
task through every layer of the app). A request is run at once (``run``): one answered then
and there is done; one that waits (an admission waits for the writer, whose hand-back
answers it) says when it is done, and the requests that arrived meanwhile wait behind it, so
a connection's answers keep their order. Once ``read_ahead`` requests wait, the socket is not
read until they are taken (as uvicorn's queue bounds a flooding client).

The connection's handler (``app.py``) still owns the connection: it waits for the
disconnect, then for the requests already received to be done (``drained``), and only then
detaches the client, as it did when it read every message itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

log = logging.getLogger("hermes.gateway")

Run = Callable[[bytes, Callable[[], None]], bool]
"""Runs one request (its text's UTF-8 bytes): True when it is done; else it calls the given
function once it is (its answer written)."""


class Requests:
    """One connection's received requests, run one at a time in order."""

    def __init__(
        self,
        run: Run,
        *,
        read_ahead: int,
        pause: Callable[[], None],
        resume: Callable[[], None],
        on_read: Callable[[], None] | None = None,
    ) -> None:
        self.run = run
        self.read_ahead = read_ahead
        self.pause = pause
        """Stop reading the socket (``read_ahead`` requests wait)."""
        self.resume = resume
        """Read the socket again."""
        self.on_read = on_read
        """Called as each request starts (the admission trace's ``read`` stamp)."""
        self.waiting: deque[bytes] = deque()
        self.busy = False
        """A request runs and is not done yet."""
        self.paused = False
        self._drained: asyncio.Future[None] | None = None

    def feed(self, data: bytes) -> None:
        """A request arrived: run it now, or behind the ones before it."""
        if self.busy or self.waiting:
            self.waiting.append(data)
            if not self.paused and len(self.waiting) >= self.read_ahead:
                self.paused = True
                self.pause()
            return
        self._go(data)

    def _go(self, data: bytes | None) -> None:
        """Run ``data``, then every request waiting, while each is done at once."""
        while data is not None:
            self.busy = True
            if self.on_read is not None:
                self.on_read()
            try:
                now = self.run(data, self._done)
            except Exception:  # (the runner answers its own errors: this is a bug)
                log.exception("a request failed")
                now = True
            if not now:
                return
            data = self._next()

    def _done(self) -> None:
        """The request that was not done at once is."""
        self._go(self._next())

    def _next(self) -> bytes | None:
        """The next waiting request (None: idle now)."""
        self.busy = False
        if not self.waiting:
            if self._drained is not None and not self._drained.done():
                self._drained.set_result(None)
            return None
        data = self.waiting.popleft()
        if self.paused and len(self.waiting) < self.read_ahead:
            self.paused = False
            self.resume()
        return data

    async def drained(self) -> None:
        """Wait until every request received so far is done (the connection has closed: no
        more arrive)."""
        if not self.busy and not self.waiting:
            return
        self._drained = asyncio.get_running_loop().create_future()
        await self._drained
