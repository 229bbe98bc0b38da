"""Create claims: ``session.create`` made idempotent by a client-supplied create id.

A client that may send ``session.create`` again (its connection dropped before the answer, or
the gateway it used died and a standby took over) names the creation with a ``create_id`` of
its own. The session and its claim (``SessionCreateClaimed`` on the
``gateway:create:<create_id>`` stream, not a session's) are stored in one transaction; the
claim's stream version is the store's uniqueness check, so of two creations with one id (on
one gateway or on two of a team) exactly one commits, and the other, like every later retry,
answers with the claimed session. The session's ``SessionStarted`` keeps the id, so a delete
or a discard of the session removes its claim with it.
"""

from __future__ import annotations

import re
from typing import Any

from hermes_es.errors import ConflictError, ValidationError
from hermes_es.queries.turns import events_since

CREATE_STREAM_PREFIX = "gateway:create:"
"""Claims live on ``gateway:create:<create_id>`` (the ``gateway:`` streams are no session's)."""

CREATE_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")
"""What a create id may be: 1 to 128 letters, digits, ``.``, ``_`` or ``-`` (a uuid4 hex)."""


class CreateClaimedError(ConflictError):
    """Another creation with the same create id committed first: answer with its session."""


def check_create_id(create_id: str) -> str:
    """``create_id`` when it is a valid create id, else a ValidationError naming it."""
    if not CREATE_ID_RE.fullmatch(create_id):
        raise ValidationError(
            f"create_id must be 1 to 128 letters, digits, '.', '_' or '-', got {create_id[:40]!r}"
            " (at $.create_id)",
            subject=create_id[:40],
        )
    return create_id


def claim_stream(create_id: str) -> str:
    """The stream holding the claim of ``create_id``."""
    return f"{CREATE_STREAM_PREFIX}{create_id}"


def claim_of(conn: Any, create_id: str) -> tuple[str, str] | None:
    """The session ``create_id`` made and the actor who made it, or None (a read; ``conn`` is
    the store's connection, either backend)."""
    from hermes_es.events.session import SessionCreateClaimed

    found: tuple[str, str] | None = None
    for stored in events_since(conn, claim_stream(create_id), 0):
        if stored.type == SessionCreateClaimed.topic:
            found = (str(stored.event["session_id"]), stored.actor)
    return found


def claim_of_session(conn: Any, session_id: str) -> str:
    """The claim stream of ``session_id`` (its ``SessionStarted``'s create id), or ""."""
    from hermes_es.events.session import SessionStarted

    first = events_since(conn, session_id, 0, limit=1)
    if not first or first[0].type != SessionStarted.topic:
        return ""
    create_id = str(first[0].event.get("create_id") or "")
    return claim_stream(create_id) if create_id else ""
