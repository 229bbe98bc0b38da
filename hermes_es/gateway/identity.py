"""Who is acting: a Principal built by the transport that verified the credential.

Its stable ``key`` is the actor of every event the connection causes. Native operators are
``uid:<n>``; dashboard logins, messaging platforms and workers get their own providers later
with the same shape (kind, provider, issuer, subject, profile, capabilities).
"""

from __future__ import annotations

import msgspec

PURPOSES: dict[str, frozenset[str]] = {
    "interactive": frozenset({"create", "read", "submit", "control"}),
    "native-http": frozenset({"read", "mutate"}),
    "worker": frozenset({"create", "read", "submit", "own-only"}),
}
"""Ticket purposes and the capabilities each one fixes."""

CLIENT_KINDS = ("cli", "tui", "desktop", "dashboard", "platform", "worker", "http")
"""Client kinds a submission may name."""


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """A verified identity acting on one profile."""

    kind: str
    """native | operator | worker | platform | service."""
    provider: str
    """Who vouches for the subject: ``uid`` for native operators."""
    issuer: str
    """The verifying party (the gateway instance for native tickets)."""
    subject: str
    """The identity within the provider (the numeric uid)."""
    profile: str
    """The profile the identity may act on."""
    capabilities: frozenset[str]
    """What it may do (fixed by its ticket's purpose)."""
    purpose: str = ""
    """The ticket purpose it authenticated with."""

    @property
    def key(self) -> str:
        """The stable actor key recorded on events: ``<provider>:<subject>``."""
        return f"{self.provider}:{self.subject}"

    def can(self, capability: str) -> bool:
        """Whether this principal holds ``capability``."""
        return capability in self.capabilities


def native(uid: int, *, profile: str, issuer: str, purpose: str) -> Principal:
    """The native operator (a local process of ``uid``) for a ticket purpose."""
    return Principal(
        kind="worker" if purpose == "worker" else "native",
        provider="uid",
        issuer=issuer,
        subject=str(uid),
        profile=profile,
        capabilities=PURPOSES[purpose],
        purpose=purpose,
    )
