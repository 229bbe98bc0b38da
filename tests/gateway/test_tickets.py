"""Tickets: single use, 30 s expiry, purpose-bound; principals' keys are event actors."""

from __future__ import annotations

import pytest

from hermes_es.gateway.identity import PURPOSES, native
from hermes_es.gateway.tickets import TICKET_TTL, TicketBook, TicketError


class FakeClock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_ticket_is_single_use_and_names_its_principal() -> None:
    """A redeemed ticket gives its principal once; the second redeem fails."""
    book = TicketBook()
    principal = native(1000, profile="default", issuer="inst", purpose="interactive")
    token = book.mint(principal)
    got = book.redeem(token, purposes=("interactive",))
    assert got == principal and got.key == "uid:1000" and got.can("submit")
    with pytest.raises(TicketError, match="already used"):
        book.redeem(token, purposes=("interactive",))


def test_ticket_expires_after_30_seconds() -> None:
    """Just before 30 s a ticket is good; after it, it is refused as expired."""
    clock = FakeClock()
    book = TicketBook(clock=clock)
    principal = native(1, profile="p", issuer="i", purpose="native-http")
    good = book.mint(principal)
    late = book.mint(principal)
    clock.now += TICKET_TTL - 0.1
    assert book.redeem(good, purposes=("native-http",)).purpose == "native-http"
    clock.now += 0.2
    with pytest.raises(TicketError, match="expired"):
        book.redeem(late, purposes=("native-http",))


def test_missing_or_wrong_purpose_ticket_is_refused() -> None:
    """No ticket, or a ticket minted for another purpose, is refused (and used up)."""
    book = TicketBook()
    with pytest.raises(TicketError, match="no ticket"):
        book.redeem(None, purposes=("interactive",))
    token = book.mint(native(1, profile="p", issuer="i", purpose="worker"))
    with pytest.raises(TicketError, match="minted for 'worker'"):
        book.redeem(token, purposes=("native-http",))
    with pytest.raises(TicketError, match="already used"):
        book.redeem(token, purposes=("worker",))


def test_purposes_fix_capabilities() -> None:
    """Interactive may submit and control; native-http may mutate; a worker only its own."""
    assert {"create", "read", "submit", "control"} == PURPOSES["interactive"]
    assert native(1, profile="p", issuer="i", purpose="native-http").can("mutate")
    worker = native(1, profile="p", issuer="i", purpose="worker")
    assert worker.kind == "worker" and worker.can("own-only") and not worker.can("control")
