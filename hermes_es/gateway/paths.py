"""The gateway's files in a profile directory: endpoint, control socket, pid, lock and log."""

from __future__ import annotations

from pathlib import Path

import msgspec


class GatewayPaths(msgspec.Struct, frozen=True):
    """Where one profile's gateway keeps its files."""

    root: Path

    @property
    def endpoint(self) -> Path:
        """``gateway.json`` (0600): port and instance id, written once the gateway is ready."""
        return self.root / "gateway.json"

    @property
    def socket(self) -> Path:
        """``gateway.sock`` (0600): the owner-only control socket that mints tickets."""
        return self.root / "gateway.sock"

    @property
    def pid(self) -> Path:
        """``gateway.pid``: the running gateway's pid."""
        return self.root / "gateway.pid"

    @property
    def lock(self) -> Path:
        """``gateway.lock``: held (flock) by the one gateway of the profile."""
        return self.root / "gateway.lock"

    @property
    def log(self) -> Path:
        """``gateway.log``: output of a background gateway."""
        return self.root / "gateway.log"


class Endpoint(msgspec.Struct, frozen=True, kw_only=True):
    """What ``gateway.json`` holds."""

    host: str
    port: int
    pid: int
    instance_id: str
    epoch: int
    profile: str
    started_at: float
    role: str = "owner"
    """``owner`` (executes) or ``standby`` (another gateway of the team owns the profile)."""
    hostname: str = ""

    @property
    def ws_url(self) -> str:
        """The WebSocket URL."""
        return f"ws://{self.host}:{self.port}/ws"

    @property
    def http_url(self) -> str:
        """The HTTP base URL."""
        return f"http://{self.host}:{self.port}"


def read_endpoint(paths: GatewayPaths) -> Endpoint | None:
    """The published endpoint, or None when absent or unreadable."""
    try:
        return msgspec.json.decode(paths.endpoint.read_bytes(), type=Endpoint)
    except (OSError, msgspec.DecodeError):
        return None
