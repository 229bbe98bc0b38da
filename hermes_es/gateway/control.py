"""The owner-only control socket: a local process of the gateway's own uid asks for a ticket.

``$PROFILE/gateway.sock`` is created 0600 in a 0700 directory, and every connection's peer uid
is checked with ``SO_PEERCRED``: only the uid that runs the gateway gets a ticket. One request
per connection, one JSON line each way::

    → {"purpose": "interactive"}
    ← {"ticket": "…", "expires_in": 30, "port": 8123, "instance_id": "…"}
    ← {"error": "…"}
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_es.gateway.identity import PURPOSES, native
from hermes_es.gateway.tickets import TICKET_TTL, TicketBook

MAX_REQUEST = 4096


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process on the other end of a Unix socket (``SO_PEERCRED``)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class ControlServer:
    """Serves ticket requests on the control socket."""

    def __init__(
        self,
        path: Path,
        tickets: TicketBook,
        *,
        profile: str,
        issuer: str,
        info: Callable[[], dict[str, Any]],
        owner_uid: int | None = None,
    ) -> None:
        self.path = path
        self.tickets = tickets
        self.profile = profile
        self.issuer = issuer
        self.info = info
        self.owner_uid = os.getuid() if owner_uid is None else owner_uid
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Bind the socket (0600, directory made 0700)."""
        directory = self.path.parent
        directory.mkdir(parents=True, exist_ok=True)
        if directory.stat().st_mode & 0o077:
            directory.chmod(0o700)
        self.path.unlink(missing_ok=True)
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._handle, path=str(self.path))
        finally:
            os.umask(old)
        self.path.chmod(0o600)

    async def stop(self) -> None:
        """Stop serving and remove the socket file."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        self.path.unlink(missing_ok=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            reply = await self._answer(reader, writer)
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> dict[str, Any]:
        sock = writer.get_extra_info("socket")
        uid = peer_uid(sock)
        if uid != self.owner_uid:
            return {
                "error": f"uid {uid} may not use this gateway (it runs as uid {self.owner_uid})"
            }
        try:
            line = await asyncio.wait_for(reader.readline(), timeout=5)
        except TimeoutError:
            return {"error": "no request within 5 s"}
        if len(line) > MAX_REQUEST:
            return {"error": "request too long"}
        try:
            request = json.loads(line or b"{}")
        except ValueError:
            return {"error": "request is not JSON"}
        purpose = request.get("purpose") if isinstance(request, dict) else None
        if purpose not in PURPOSES:
            return {"error": f"unknown purpose {purpose!r}: expected one of {', '.join(PURPOSES)}"}
        principal = native(uid, profile=self.profile, issuer=self.issuer, purpose=purpose)
        ticket = self.tickets.mint(principal)
        return {"ticket": ticket, "expires_in": TICKET_TTL, "actor": principal.key, **self.info()}


class ControlError(Exception):
    """The control socket refused or could not be reached."""


def request_ticket(path: Path, purpose: str, *, timeout: float = 5.0) -> dict[str, Any]:
    """Ask the control socket at ``path`` for a ticket (blocking)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except OSError as exc:
            raise ControlError(f"cannot reach the gateway's control socket {path}: {exc}") from exc
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            # A refused peer is answered (and closed on) before its request is read.
            sock.sendall(json.dumps({"purpose": purpose}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            try:
                chunk = sock.recv(4096)
            except OSError as exc:
                raise ControlError(f"the control socket {path} failed: {exc}") from exc
            if not chunk:
                break
            data += chunk
    try:
        reply = json.loads(data or b"{}")
    except ValueError as exc:
        raise ControlError(f"the control socket answered garbage: {data[:80]!r}") from exc
    if not isinstance(reply, dict) or "ticket" not in reply:
        error = reply.get("error") if isinstance(reply, dict) else None
        raise ControlError(f"the gateway refused a ticket: {error or 'no answer'}")
    return reply
