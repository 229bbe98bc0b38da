"""One WebSocket route on a real uvicorn server on 127.0.0.1, for the outbox and wire tests."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket


async def serve_route(
    handler: Callable[[WebSocket], Awaitable[None]],
    client: Callable[[str], Awaitable[None]],
    protocol: Any,
) -> None:
    """Serve ``handler`` at ``/ws`` (uvicorn's WebSocket ``protocol``, no compression) on a
    free port, run ``client`` with the route's URL (at most 60 s), then stop the server."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        Starlette(routes=[WebSocketRoute("/ws", handler)]),
        log_level="warning",
        lifespan="off",
        ws=protocol,
        ws_per_message_deflate=False,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        await asyncio.wait_for(client(f"ws://127.0.0.1:{port}/ws"), 60)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
