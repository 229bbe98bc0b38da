"""Transcripts: the display history (now or as of a version) and the model context."""

from __future__ import annotations

from typing import Any

import apsw
import msgspec

from hermes_es.errors import ValidationError
from hermes_es.projections.base import Change
from hermes_es.projections.messages import MessagesProjector
from hermes_es.store.decoding import decode_row

_JSON = msgspec.json.Decoder()

DISPLAY_STATES = ("active", "compacted")


class TranscriptMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message as a transcript shows it."""

    seq: int
    role: str
    content: str
    parts: list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] = []
    tool_call_id: str | None = None
    tool_name: str | None = None
    reasoning: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    media: list[dict[str, Any]] = []
    finish_reason: str | None = None
    at: float = 0.0
    uid: str = ""
    state: str = "active"
    imported: bool = False
    reasoning_content: str | None = None
    token_count: int | None = None

    @property
    def active(self) -> bool:
        """Part of the live model context."""
        return self.state == "active" and not self.imported

    @property
    def compacted(self) -> bool:
        """Archived by in-place compaction (still shown)."""
        return self.state == "compacted"


_SELECT = (
    "SELECT seq, role, content, parts, tool_calls, tool_call_id, tool_name, reasoning,"
    " tokens_in, tokens_out, media, finish_reason, at, uid, state, imported,"
    " reasoning_content, token_count FROM messages"
)


def _row(r: tuple[Any, ...]) -> TranscriptMessage:
    return TranscriptMessage(
        seq=r[0], role=r[1], content=r[2],
        parts=_JSON.decode(r[3]) if r[3] else None,
        tool_calls=_JSON.decode(r[4]) if r[4] else [],
        tool_call_id=r[5], tool_name=r[6], reasoning=r[7], tokens_in=r[8], tokens_out=r[9],
        media=_JSON.decode(r[10]) if r[10] else [], finish_reason=r[11], at=r[12], uid=r[13],
        state=r[14], imported=bool(r[15]), reasoning_content=r[16], token_count=r[17],
    )  # fmt: skip


def messages_of(
    conn: apsw.Connection, session_id: str, *, scope: str = "display"
) -> list[TranscriptMessage]:
    """Messages in display order. ``scope``: display (what exports show), context (what the
    model sees), or all (every stored row, rewound and edited ones included)."""
    where = " WHERE session_id = ?"
    if scope == "display":
        where += " AND state IN ('active', 'compacted')"
    elif scope == "context":
        where += " AND state = 'active' AND imported = 0"
    elif scope != "all":
        raise ValueError(f"unknown transcript scope {scope!r}")
    rows = conn.execute(_SELECT + where + " ORDER BY ord, seq", (session_id,)).fetchall()
    return [_row(r) for r in rows]


def last_version(conn: apsw.Connection, session_id: str) -> int:
    """The newest event version of a stream (0 when it has none)."""
    rows = conn.execute(
        "SELECT MAX(originator_version) FROM events WHERE originator_id = ?", (session_id,)
    ).fetchall()
    return int(rows[0][0] or 0)


def messages_as_of(
    conn: apsw.Connection, session_id: str, version: int, *, scope: str = "display"
) -> list[TranscriptMessage]:
    """The transcript as it stood at stream ``version`` (1..last), replayed from the log."""
    last = last_version(conn, session_id)
    if not 1 <= version <= last:
        raise ValidationError(
            f"session {session_id} has only {last} events; --as-of must be 1..{last}, "
            f"got {version}",
            subject=session_id,
        )
    rows = conn.execute(
        "SELECT originator_version, topic, state, id FROM events WHERE originator_id = ?"
        " AND originator_version <= ? ORDER BY originator_version",
        (session_id, version),
    ).fetchall()
    scratch = apsw.Connection("")
    try:
        projector = MessagesProjector(text_in_rows=True)  # the log is not beside it
        with scratch:
            for statement in projector.schema():
                scratch.execute(statement)
            for v, topic, state, position in rows:
                event = decode_row(topic, state, stream=session_id, version=v, position=position)
                change = Change(position=v, stream=session_id, version=v, event=event)
                projector.apply(scratch, change)
        return messages_of(scratch, session_id, scope=scope)
    finally:
        scratch.close()
