"""The gateway's WebSocket protocol: what a connection is sent in one loop iteration goes out in
one write.

uvicorn's websockets-sansio protocol writes each WebSocket frame with its own
``transport.write``, which on an idle socket is a ``send`` system call at once; on loopback
each of those also runs the receiving side's TCP path and wakes the client. A turn sends a
client its frames in bursts (a commit's events, an admission's event and answer, a reply's
stream item, message and finish), so here the connection's transport holds what is written
to it until the end of the current loop iteration (``loop.call_soon``: after the callbacks
already due, before the next round of I/O), then writes it all at once; one callback writes
every connection's (``Flusher``). The frames, their order and their bytes on the wire are
unchanged; only how many ``send`` calls carry them.

A close or ``write_eof`` writes what is held first (``abort`` drops it, as the transport
would); so does holding more than ``FLUSH_BYTES``. Flow control stays the transport's own:
once the written bytes fill the socket buffer, uvicorn's ``writable`` pauses the senders.

The gateway's frames also skip the ASGI layers: ``GatewayWebSocketProtocol.send_text_frame``
writes a text frame serialized here by the websockets library (``text_frame``: its header
serialized once per payload length, one frame shared by every client of a fan-out)
straight to the transport while the connection is open and writable; anything else (a
full socket, a closing or closed connection) goes through Starlette and uvicorn as before
(``outbox.Outbox``). Requests come in past them too: once the app calls ``take_requests``,
each text message goes to its reader (``connection.Requests``) as it is parsed, not through
uvicorn's queue.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State

log = logging.getLogger("hermes.gateway")

WIRE = "hermes.wire"
"""The ASGI scope key under which a connection's ``GatewayWebSocketProtocol`` is found."""

FLUSH_BYTES = 64 * 1024
"""Held bytes that are written at once rather than at the end of the loop iteration."""

READ_AHEAD = 32
"""Messages a connection may have waiting for the app before its socket is not read."""


class Flusher:
    """The transports of one event loop holding writes: all of them written at the end of the
    loop iteration by one callback (not one per connection)."""

    __slots__ = ("_holding",)

    def __init__(self) -> None:
        self._holding: list[HeldTransport] = []

    def hold(self, transport: HeldTransport) -> None:
        """``transport`` holds writes now (on its loop): write them at the end of this
        iteration."""
        if not self._holding:
            asyncio.get_running_loop().call_soon(self.flush)
        self._holding.append(transport)

    def flush(self) -> None:
        """Write what every holding transport holds (each as one write)."""
        holding, self._holding = self._holding, []
        for transport in holding:
            try:
                transport.flush()
            except Exception:  # (one transport's failure must not keep the others' writes)
                log.exception("writing to a connection failed")


_flushers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Flusher] = (
    weakref.WeakKeyDictionary()
)


def flusher_of(loop: asyncio.AbstractEventLoop) -> Flusher:
    """The loop's ``Flusher``."""
    flusher = _flushers.get(loop)
    if flusher is None:
        flusher = _flushers[loop] = Flusher()
    return flusher


class HeldTransport:
    """An asyncio transport whose writes of one loop iteration are joined into one write."""

    __slots__ = ("_flusher", "_held", "_size", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._flusher = flusher_of(loop)
        self._held: list[bytes] = []
        self._size = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Hold ``data`` until the end of this loop iteration (in order)."""
        if not data:
            return
        if not self._held:
            self._flusher.hold(self)
        self._held.append(bytes(data))
        self._size += len(data)
        if self._size >= FLUSH_BYTES:
            self.flush()

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Write what is held, as one write."""
        held = self._held
        if not held:
            return
        self._held = []
        self._size = 0
        self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = []
        self._size = 0
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._size

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, pause_reading, …
        return getattr(self._transport, name)


_last: tuple[bytes | None, bytes] = (None, b"")
"""The last payload framed and its frame (a fan-out frames each event once)."""

_headers: dict[int, bytes] = {}
"""Payload length → the header the websockets library serializes for a final, unmasked
text frame of that length (it depends on nothing else): the library serializes each length
once, then a frame is that header and its payload."""

HEADER_LENGTHS = 4096
"""Most payload lengths whose header is kept (forgotten all at once past it)."""


def text_frame(payload: bytes) -> bytes:
    """A final, unmasked text frame carrying ``payload`` (UTF-8), serialized by the websockets
    library as its server connection does for ``send_text`` without extensions."""
    global _last
    if payload is _last[0]:
        return _last[1]
    size = len(payload)
    header = _headers.get(size)
    if header is None:
        framed = Frame(Opcode.TEXT, payload).serialize(mask=False)
        if len(_headers) >= HEADER_LENGTHS:
            _headers.clear()
        header = _headers[size] = framed[: len(framed) - size]
    else:
        framed = header + payload
    _last = (payload, framed)
    return framed


class GatewayWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's websockets-sansio protocol on a ``HeldTransport``, found in its connection's
    ASGI scope under ``WIRE``.

    uvicorn stops reading the socket after each message it queues for the app, until the app
    takes it (two ``epoll_ctl`` calls and the selector's bookkeeping per request); here it
    stops only once ``READ_AHEAD`` messages wait, which bounds a flooding client the same way.
    """

    reader: Callable[[bytes], None] | None = None
    """Takes each text message (its UTF-8 bytes) as it is parsed, instead of the ASGI queue,
    once the app set it (``take_requests``): the gateway's ``connection.Requests.feed``."""

    def take_requests(self, reader: Callable[[bytes], None]) -> None:
        """From now on hand every text message to ``reader``, those already queued for the
        app first (in order; anything queued after them stays for the app to read)."""
        queued: list[Any] = []
        while not self.queue.empty():
            queued.append(self.queue.get_nowait())
        self.reader = reader
        for index, message in enumerate(queued):
            if message["type"] != "websocket.receive" or "text" not in message:
                for later in queued[index:]:  # (a disconnect, a binary message: the app's)
                    self.queue.put_nowait(later)
                break
            reader(message["text"].encode())

    def pause_requests(self) -> None:
        """Stop reading the socket (the app has enough requests waiting)."""
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_requests(self) -> None:
        """Read the socket again (unless messages still wait in the ASGI queue)."""
        if self.read_paused and self.queue.empty():
            self.read_paused = False
            self.transport.resume_reading()

    def send_receive_event_to_app(self) -> None:
        reader = self.reader
        if reader is not None and self.curr_msg_data_type == "text" and not self.close_sent:
            data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
            self.frames = []
            try:
                data.decode()  # (uvicorn's check: a text message is valid UTF-8)
            except UnicodeDecodeError:
                self.logger.exception("Invalid UTF-8 sequence received from client.")
                self.conn.send_close(1007)
                self.handle_parser_exception()
                return
            reader(bytes(data))
            return
        paused = self.read_paused
        self.read_paused = True  # (so uvicorn does not pause reading for this message)
        try:
            super().send_receive_event_to_app()
        finally:
            self.read_paused = paused
        if not paused and self.queue.qsize() >= READ_AHEAD:
            self.read_paused = True
            self.transport.pause_reading()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.transport = HeldTransport(self.transport, asyncio.get_running_loop())  # type: ignore[assignment]

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope[WIRE] = self

    def send_text_frame(self, payload: bytes) -> bool:
        """Write a text frame carrying ``payload`` now, past the ASGI layers; False when it
        cannot go this way (the connection is not open, is closing, or its socket buffer is
        full): the caller then sends it through ASGI, which waits or raises as it should."""
        if (
            self.close_sent
            or self.disconnected
            or not self.handshake_complete
            or not self.writable.is_set()
            or self.conn.state is not State.OPEN
            or self.conn.extensions
        ):
            return False
        self.transport.write(text_frame(payload))
        return True

    def send_text_frames(self, payloads: Sequence[bytes]) -> int:
        """``send_text_frame`` for each of ``payloads`` in order, the connection checked once
        (its socket buffer before each): how many were written (the caller sends the rest
        through ASGI)."""
        if (
            self.close_sent
            or self.disconnected
            or not self.handshake_complete
            or self.conn.state is not State.OPEN
            or self.conn.extensions
        ):
            return 0
        writable, write = self.writable, self.transport.write
        for index, payload in enumerate(payloads):
            if not writable.is_set():
                return index
            write(text_frame(payload))
        return len(payloads)
