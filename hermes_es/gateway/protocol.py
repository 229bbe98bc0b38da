"""The gateway protocol: JSON-RPC 2.0 messages and each method's params, as msgspec Structs.

Documented in ``docs/gateway-protocol.md``. Every frame is one JSON object; params are
decoded into the method's Struct, so a bad request gets ``-32602`` naming the exact field.
"""

from __future__ import annotations

from typing import Any

import msgspec

# -- error codes ------------------------------------------------------------------------------

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
NOT_FOUND = 4004
"""No such session (or an ambiguous reference: ``data.candidates`` lists them)."""
REFUSED = 4009
"""The session refused the command (an invariant: nothing queued to cancel, …)."""
CONFLICT = 4090
"""``expected_version`` is not the session's current version (``data.actual`` is)."""
FORBIDDEN = 4030
"""The connection's ticket purpose does not allow this method."""
DRAINING = 4031
"""The gateway is shutting down and admits no new turns."""
NOT_OWNER = 4032
"""This gateway is a standby of its team: execution methods run on the owner (``data.owner``)."""
INVALID = 4000
"""The request's content is invalid (an empty message, a bad title, …)."""
BUSY = 4290
"""state.db stayed locked; nothing was changed; retry."""

# -- envelopes --------------------------------------------------------------------------------


class Request(msgspec.Struct, frozen=True, kw_only=True):
    """A call (with ``id``) or a notification (without)."""

    jsonrpc: str
    method: str
    id: int | str | None = None
    params: dict[str, Any] = {}


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What went wrong."""

    code: int
    message: str
    data: dict[str, Any] | None = None


class Response(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The answer to a call: ``result`` or ``error``."""

    jsonrpc: str = "2.0"
    id: int | str | None = None
    result: Any = None
    error: ErrorBody | None = None


class Notification(msgspec.Struct, frozen=True, kw_only=True):
    """A server push: ``session.event`` (stored, with a sequence) or ``turn.stream`` (live)."""

    jsonrpc: str = "2.0"
    method: str
    params: Any
    """A JSON object: a mapping, or a Struct encoded as one (a stored event)."""


class LiveEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A ``session.event`` as the writer just stored it: the fields of
    ``queries.turns.StreamEvent``, in its order, with the event Struct itself as ``event``
    (encoded as the mapping ``StreamEvent`` holds: the same bytes, with no mapping built)."""

    session_id: str
    sequence: int
    type: str
    at: float
    actor: str
    event: Any


def live_event(session_id: str, version: int, event: Any) -> LiveEvent:
    """``queries.turns.stream_event`` of an event the writer just stored."""
    return LiveEvent(
        session_id=session_id,
        sequence=version,
        type=event.topic,
        at=event.at,
        actor=event.actor,
        event=event,
    )


# -- params -----------------------------------------------------------------------------------


class CreateParams(msgspec.Struct, frozen=True, kw_only=True):
    """``session.create``: a new session, attached."""

    source: str = "cli"
    title: str = ""
    workspace: str = ""
    """Working directory to record (default: the gateway's)."""
    model: str = ""
    parent_id: str = ""
    """The session the new one continues from (``parent_kind`` names the link)."""
    parent_kind: str = ""
    """``reset`` (``/reset``: an explicit new conversation linked to ``leave``), or empty."""
    leave: str = ""
    """The session the client leaves (``/new``, ``/reset``): ended ``new_session`` once the new
    one exists (unless a turn runs or waits in it) and detached; without a parent link it is
    removed when this connection created it and nothing was said in it."""
    create_id: str = ""
    """The client's id for this creation: the same id again (a retry after a dropped
    connection or a takeover) answers with the session it made, ``duplicate: true``."""


class ResumeParams(msgspec.Struct, frozen=True, kw_only=True):
    """``session.resume``: attach to an existing session.

    ``ref`` is an id, unique prefix, title or ``latest``; with ``workspace`` and no ``ref``,
    the latest CLI session of that workspace.
    """

    ref: str = ""
    workspace: str = ""


class ListParams(msgspec.Struct, frozen=True, kw_only=True):
    """``session.list``."""

    limit: int = 20
    sources: list[str] = []


class SessionParams(msgspec.Struct, frozen=True, kw_only=True):
    """Methods naming one session: ``session.detach``, ``session.close``."""

    session_id: str
    reason: str = "user_exit"
    """``session.close``: user_exit, run_complete (a one-shot run) or switched (``/resume``)."""


class SubmitParams(msgspec.Struct, frozen=True, kw_only=True):
    """``prompt.submit``: admit a prompt; the same ``submission_id`` twice is admitted once."""

    session_id: str
    submission_id: str
    text: str
    client_kind: str = "cli"


class SinceParams(msgspec.Struct, frozen=True, kw_only=True):
    """``events.since``: stored events after ``last_sequence`` (0: from the start)."""

    session_id: str
    last_sequence: int = 0
    limit: int = 1000


class TurnParams(msgspec.Struct, frozen=True, kw_only=True):
    """``turn.cancel`` (a queued turn) and ``turn.resolve`` (an unknown turn; 0: the oldest)."""

    session_id: str = ""
    session: str = ""
    """A reference (id, prefix, title) instead of ``session_id`` (HTTP callers)."""
    turn: int = 0
    resolution: str = "discard"


class MutateParams(msgspec.Struct, frozen=True, kw_only=True):
    """``session.rename`` / ``pin`` / ``archive`` / ``delete`` with an optional expected version."""

    session_id: str = ""
    session: str = ""
    """A reference (id, prefix, title) instead of ``session_id``."""
    title: str = ""
    pinned: bool = True
    archived: bool = True
    reason: str = "user"
    """``session.archive``: user, or sweep (the idle sweep's archive)."""
    expected_version: int | None = None


class DeleteManyParams(msgspec.Struct, frozen=True, kw_only=True):
    """``sessions.delete``: delete several sessions (what ``hermes sessions prune`` selected)."""

    session_ids: list[str]
    reason: str = "prune"


ENCODER = msgspec.json.Encoder()
REQUEST_DECODER = msgspec.json.Decoder(Request)


def encode(message: Response | Notification) -> bytes:
    """One frame."""
    return ENCODER.encode(message)


def error(id_: int | str | None, code: int, message: str, **data: Any) -> Response:
    """An error response."""
    return Response(id=id_, error=ErrorBody(code=code, message=message, data=data or None))
