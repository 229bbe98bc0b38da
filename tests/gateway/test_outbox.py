"""A connection's outbox (``gateway.outbox``): frames sent from plain callbacks reach the client
in order, also once the socket is full and writes must wait; a client that falls too far
behind is disconnected (1013). Over a real uvicorn server and a real WebSocket on 127.0.0.1,
with uvicorn's own websockets-sansio protocol and with the gateway's (``gateway.wire``:
direct frame writes, each loop iteration's writes joined)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from hermes_es.gateway.outbox import GONE, Outbox, run_eagerly
from hermes_es.gateway.wire import GatewayWebSocketProtocol
from tests.gateway.asgi_server import serve_route

PROTOCOLS = pytest.mark.parametrize(
    "protocol", ["websockets-sansio", GatewayWebSocketProtocol], ids=["uvicorn", "gateway"]
)

FRAME = 64 * 1024
"""Big enough that a few hundred of them fill the loopback socket's buffers."""


def _frame(n: int) -> bytes:
    return f"{n:06d}".encode() + b"x" * FRAME


async def _serving(
    stats: dict[str, Any], client: Callable[[str], Awaitable[None]], protocol: Any
) -> None:
    """Serve one route whose handler, on the client's first message ``{"frames", "limit"}``,
    sends that many frames through an ``Outbox`` from one plain loop (no await between
    them), then runs ``client`` against it."""

    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        ask = json.loads(await websocket.receive_text())

        def gone() -> None:
            stats["gone"] = True

        outbox = Outbox(websocket, limit=ask["limit"], on_gone=gone)
        stats["direct"] = outbox.wire is not None
        stats["most_waiting"] = 0
        batch = ask.get("batch", 1)
        for first in range(0, ask["frames"], batch):
            if batch == 1:
                outbox.send(_frame(first))
            else:  # several at once (a commit's events to one client)
                outbox.send_all(
                    [_frame(n) for n in range(first, min(first + batch, ask["frames"]))]
                )
            stats["most_waiting"] = max(stats["most_waiting"], len(outbox.backlog))
        stats["suspended"] = outbox.waiting is not None or stats.get("gone", False)
        try:
            while True:
                await websocket.receive_text()
        except GONE:
            pass
        finally:
            outbox.close()

    await serve_route(ws, client, protocol)


@PROTOCOLS
@pytest.mark.parametrize("batch", [1, 7], ids=["send", "send_all"])
def test_frames_sent_from_a_callback_arrive_in_order_past_a_full_socket(
    protocol: Any, batch: int
) -> None:
    """400 frames of 64 KiB sent in one go (one at a time, or seven at a time with
    ``send_all``): the first ones are written at once, the rest wait behind the write the
    full socket suspended, and the client reads every one, in order."""
    stats: dict[str, Any] = {}
    got: list[int] = []

    async def client(url: str) -> None:
        async with connect(url, max_size=2**20, compression=None) as ws:
            await ws.send(json.dumps({"frames": 400, "limit": 10_000, "batch": batch}))
            for _ in range(400):
                frame = await ws.recv()
                assert len(frame) == FRAME + 6
                got.append(int(frame[:6]))

    asyncio.run(_serving(stats, client, protocol))
    assert stats["direct"] is (protocol is GatewayWebSocketProtocol)
    assert got == list(range(400))
    assert stats["most_waiting"] > 0  # the backlog was used: some writes had to wait
    assert stats["suspended"] and not stats.get("gone")


@PROTOCOLS
def test_a_client_too_far_behind_gets_what_was_written_then_is_closed_1013(protocol: Any) -> None:
    """With room for 3 waiting frames, a client that reads nothing while 400 are sent is given
    up: it still reads the frames written before, in order, then the close code 1013."""
    stats: dict[str, Any] = {}
    got: list[int] = []
    closed: list[int | None] = []

    async def client(url: str) -> None:
        async with connect(url, max_size=2**20, compression=None) as ws:
            await ws.send(json.dumps({"frames": 400, "limit": 3}))
            try:
                while True:
                    frame = await ws.recv()
                    got.append(int(frame[:6]))
            except ConnectionClosed as exc:
                closed.append(exc.rcvd.code if exc.rcvd is not None else None)

    asyncio.run(_serving(stats, client, protocol))
    assert stats["gone"] is True
    assert closed == [1013]
    assert 0 < len(got) < 400
    assert got == list(range(len(got)))  # a gapless prefix: nothing reordered or skipped


def test_run_eagerly_runs_a_coroutine_up_to_its_first_suspension() -> None:
    """A coroutine that never suspends is finished on the spot (None); one that does is
    handed to a task that finishes it with what it awaited; an exception raised before the
    first suspension propagates to the caller."""
    steps: list[str] = []

    async def straight() -> None:
        steps.append("straight")

    async def waits(gate: asyncio.Future[str]) -> None:
        steps.append("before")
        steps.append(await gate)

    async def fails() -> None:
        raise OSError("gone")

    async def main() -> None:
        assert run_eagerly(straight()) is None
        assert steps == ["straight"]
        gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        task = run_eagerly(waits(gate))
        assert task is not None and steps == ["straight", "before"]
        gate.set_result("after")
        await task
        assert steps == ["straight", "before", "after"]
        with pytest.raises(OSError, match="gone"):
            run_eagerly(fails())

    asyncio.run(main())
