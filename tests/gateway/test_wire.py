"""The gateway's WebSocket protocol (``gateway.wire``): its text frames are byte for byte the
websockets library's, and what one loop iteration writes to a connection goes out in one
write, in order, also across a close. Over a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.websockets import WebSocket
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.server import ServerProtocol

from hermes_es.gateway.outbox import GONE, Outbox
from hermes_es.gateway.wire import (
    FLUSH_BYTES,
    READ_AHEAD,
    WIRE,
    GatewayWebSocketProtocol,
    text_frame,
)
from tests.gateway.asgi_server import serve_route


def test_a_text_frame_is_what_a_websockets_server_connection_writes() -> None:
    """Every length class of the header (7-bit, 16-bit, 64-bit), and a non-ASCII payload;
    each length again with another payload (its header is serialized once)."""
    for payload in (b"", b"{}", b"x" * 125, b"y" * 126, b"z" * 65535, b"w" * 65536,
                    '{"t":"é ✓ 𝄞"}'.encode()):  # fmt: skip
        conn = ServerProtocol()
        conn.state = conn.state.OPEN  # (as after a handshake)
        conn.send_text(payload)
        assert text_frame(payload) == b"".join(conn.data_to_send())
        assert text_frame(payload) is text_frame(payload)  # one serialization for a fan-out
        # another payload of that length: the header serialized for the first one, its bytes
        other = bytes(reversed(payload))
        conn.send_text(other)
        assert text_frame(other) == b"".join(conn.data_to_send())


def _serve(handler: Any, client: Any) -> None:
    asyncio.run(serve_route(handler, client, GatewayWebSocketProtocol))


def _count_writes(websocket: WebSocket, writes: list[int]) -> Any:
    """Record the size of every write to the connection's socket transport; returns the
    connection's ``GatewayWebSocketProtocol``."""
    wire = websocket.scope[WIRE]
    real = wire.transport._transport
    original = real.write

    def counted(data: bytes) -> None:
        writes.append(len(data))
        original(data)

    real.write = counted
    return wire


def test_one_iterations_frames_go_out_in_one_write_in_order_then_the_close() -> None:
    """Frames sent from one callback (direct writes and one through ASGI) and the close
    after them are one socket write: the client gets them all, in order, then 1000; frames
    past ``FLUSH_BYTES`` are written without waiting for the iteration's end."""
    writes: list[int] = []
    got: list[str] = []
    closed: list[int | None] = []

    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.receive_text()
        wire = _count_writes(websocket, writes)
        outbox = Outbox(websocket, limit=100, on_gone=lambda: None)
        for n in range(5):
            outbox.send(f"small {n}".encode())
        await websocket.send_text("through asgi")  # (does not suspend: joins the same write)
        assert writes == []  # nothing written yet: held until the iteration ends
        await websocket.close(code=1000)
        assert len(writes) == 1  # the close wrote what was held first, then itself
        writes.clear()
        big = b"b" * FLUSH_BYTES
        assert not wire.send_text_frame(big)  # closed: the caller must go through ASGI

    async def client(url: str) -> None:
        async with connect(url, compression=None) as conn:
            await conn.send("go")
            try:
                while True:
                    got.append(str(await conn.recv()))
            except ConnectionClosed as exc:
                closed.append(exc.rcvd.code if exc.rcvd is not None else None)

    _serve(ws, client)
    assert got == [*(f"small {n}" for n in range(5)), "through asgi"]
    assert closed == [1000]


def test_held_bytes_past_the_bound_are_written_at_once() -> None:
    """A burst bigger than ``FLUSH_BYTES`` is written as it passes the bound, not held for
    the whole iteration; every frame still arrives, in order."""
    writes: list[int] = []
    got: list[int] = []

    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.receive_text()
        _count_writes(websocket, writes)
        outbox = Outbox(websocket, limit=1000, on_gone=lambda: None)
        chunk = FLUSH_BYTES // 4
        for n in range(10):
            outbox.send(f"{n:04d}".encode() + b"x" * chunk)
        assert len(writes) >= 2  # written at the bound, twice, before the iteration ended
        try:
            while True:
                await websocket.receive_text()
        except GONE:
            pass
        finally:
            outbox.close()

    async def client(url: str) -> None:
        async with connect(url, compression=None, max_size=2**20) as conn:
            await conn.send("go")
            for _ in range(10):
                got.append(int(str(await conn.recv())[:4]))

    _serve(ws, client)
    assert got == list(range(10))


def test_reading_pauses_only_once_read_ahead_messages_wait() -> None:
    """A client's requests are read on without a pause per message (uvicorn's own protocol
    stops reading after each one); once ``READ_AHEAD`` of them wait for the app the socket
    is not read, and once the app took them all it is read again: every message arrives,
    in order."""
    seen: dict[str, Any] = {}
    got: list[str] = []
    pauses: list[int] = []

    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        wire = websocket.scope[WIRE]
        real = wire.transport._transport
        original = real.pause_reading

        def counted() -> None:
            pauses.append(wire.queue.qsize())
            original()

        real.pause_reading = counted
        await websocket.send_text("ready")
        for _ in range(3):
            got.append(await websocket.receive_text())
        seen["pauses_for_three"] = len(pauses)
        await websocket.send_text("next")
        await asyncio.sleep(0.5)  # meanwhile the client sends 200 more
        seen["paused"] = wire.read_paused
        for _ in range(200):
            got.append(await websocket.receive_text())
        seen["resumed"] = not wire.read_paused
        await websocket.send_text("done")

    async def client(url: str) -> None:
        async with connect(url, compression=None) as conn:
            assert await conn.recv() == "ready"
            for n in range(3):
                await conn.send(f"f{n}")
                await asyncio.sleep(0.05)
            assert await conn.recv() == "next"
            for n in range(200):
                await conn.send(f"m{n}")
            assert await conn.recv() == "done"

    _serve(ws, client)
    assert got == [*(f"f{n}" for n in range(3)), *(f"m{n}" for n in range(200))]
    assert seen["pauses_for_three"] == 0
    assert seen["paused"] is True
    assert pauses and all(waiting >= READ_AHEAD for waiting in pauses)
    assert seen["resumed"] is True
