"""The gateway's files in a profile directory: endpoint, control socket, pid, lock and log."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

PROC_LOCKS = Path("/proc/locks")
"""The kernel's table of file locks (Linux): who holds the profile's gateway lock."""


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


def lock_holder(paths: GatewayPaths, *, table: Path = PROC_LOCKS) -> int | None:
    """The pid holding the profile's gateway lock (``flock``): 0 when none does, None when
    this system cannot tell (no readable lock table).

    Only the running gateway holds it, so a pid read from ``gateway.json`` or ``gateway.pid``
    that a crash left behind (and that another process may have been given since) is not
    taken for the gateway.
    """
    try:
        stat = os.stat(paths.lock)
    except FileNotFoundError:
        return 0
    except OSError:
        return None
    try:
        text = table.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}"
    loose = 0
    for line in text.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:5547352 0 EOF" (a waiter has "->" after "1:")
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[3] != "WRITE":
            continue
        where, _, inode = fields[5].rpartition(":")
        if inode != str(stat.st_ino) or not fields[4].isdigit():
            continue
        if where == device:
            return int(fields[4])
        loose = loose or int(fields[4])  # an overlay file system may name another device
    return loose


def gateway_runs(paths: GatewayPaths, pid: int) -> bool:
    """Whether ``pid`` is the gateway running for the profile: it holds the profile's lock
    (where the lock table cannot be read: a process with that pid exists)."""
    from hermes_es.commands.holders import pid_alive

    if pid <= 0:
        return False
    holder = lock_holder(paths)
    return pid_alive(pid) if holder is None else holder == pid
