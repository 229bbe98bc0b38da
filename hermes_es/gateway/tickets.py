"""Single-use tickets: minted on the control socket, redeemed once by a WebSocket or HTTP call."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable

from hermes_es.gateway.identity import PURPOSES, Principal

TICKET_TTL = 30.0
"""Seconds a ticket stays valid."""


class TicketError(Exception):
    """A ticket was missing, unknown, used, expired or minted for another purpose."""


class TicketBook:
    """Outstanding tickets (in memory only: a restarted gateway honours none of the old ones)."""

    def __init__(
        self, *, ttl: float = TICKET_TTL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.clock = clock
        self._tickets: dict[str, tuple[Principal, float]] = {}
        self._lock = threading.Lock()

    def mint(self, principal: Principal) -> str:
        """A new ticket for ``principal`` (its purpose fixes its capabilities)."""
        if principal.purpose not in PURPOSES:
            raise TicketError(f"unknown ticket purpose {principal.purpose!r}")
        token = secrets.token_urlsafe(32)
        now = self.clock()
        with self._lock:
            self._tickets = {t: v for t, v in self._tickets.items() if v[1] > now}
            self._tickets[token] = (principal, now + self.ttl)
        return token

    def redeem(self, token: str | None, *, purposes: tuple[str, ...]) -> Principal:
        """The principal of a valid ticket for one of ``purposes``; the ticket is used up."""
        if not token:
            raise TicketError("no ticket: ask the control socket for one")
        with self._lock:
            entry = self._tickets.pop(token, None)
        if entry is None:
            raise TicketError("unknown or already used ticket")
        principal, expires = entry
        if self.clock() > expires:
            raise TicketError("expired ticket (tickets are valid for 30 s)")
        if principal.purpose not in purposes:
            raise TicketError(
                f"ticket minted for {principal.purpose!r}, not for {' or '.join(purposes)}"
            )
        return principal
