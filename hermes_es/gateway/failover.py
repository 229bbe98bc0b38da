"""Finding the live owner among a team's gateways, for a client that can reach several of them.

Each gateway of a team publishes its role in its own ``gateway.json`` (rewritten when a standby
takes over) and answers ``gateway.status`` with the live owner as the store's registry shows it.
A client given several profile directories (one per gateway it may use: its own ticket source,
the native auth rules unchanged) picks the one whose gateway owns the profile now; after the
owner dies it waits for a standby to take over and connects there, then asks ``events.since``
for what it missed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from hermes_es.gateway.client import Connection, GatewayError, GatewayHandle, running_gateway

TAKEOVER_WAIT_S = 10.0
"""How long ``connect_owner`` waits for a live owner by default."""


def live_owner(profile_dirs: Sequence[Path]) -> GatewayHandle | None:
    """The running gateway among ``profile_dirs`` that owns the profile now, or None."""
    for directory in profile_dirs:
        handle = running_gateway(directory)
        if handle is not None and handle.endpoint.role == "owner":
            return handle
    return None


def wait_owner(profile_dirs: Sequence[Path], timeout: float = TAKEOVER_WAIT_S) -> GatewayHandle:
    """The live owner, waiting up to ``timeout`` s for one (a standby taking over)."""
    deadline = time.monotonic() + timeout
    while True:
        handle = live_owner(profile_dirs)
        if handle is not None:
            return handle
        if time.monotonic() >= deadline:
            shown = ", ".join(str(d) for d in profile_dirs)
            raise GatewayError(
                f"no gateway owns the profile within {timeout:.0f} s (tried {shown})"
            )
        time.sleep(0.05)


def connect_owner(
    profile_dirs: Sequence[Path],
    client_kind: str = "cli",
    *,
    purpose: str = "interactive",
    timeout: float = TAKEOVER_WAIT_S,
) -> Connection:
    """A connection to the live owner (waiting for a takeover), with a ticket of its own."""
    return attach_owner(profile_dirs, client_kind, purpose=purpose, timeout=timeout)[1]


def attach_owner(
    profile_dirs: Sequence[Path],
    client_kind: str = "cli",
    *,
    purpose: str = "interactive",
    timeout: float = TAKEOVER_WAIT_S,
) -> tuple[GatewayHandle, Connection]:
    """The live owner and a connection to it (``connect_owner``, saying which gateway). A
    gateway that has just died may still look live (its pid not yet reaped, its files left):
    connecting to it fails, and the wait goes on until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        handle = wait_owner(profile_dirs, max(0.0, deadline - time.monotonic()))
        try:
            return handle, handle.connect(client_kind, purpose=purpose)
        except GatewayError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)  # it died between reading gateway.json and connecting
