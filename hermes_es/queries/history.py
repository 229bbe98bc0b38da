"""Audit replay: every event of a session, with version, time, type, actor and a summary."""

from __future__ import annotations

import apsw
import msgspec

from hermes_es import events as ev
from hermes_es.aggregates.validation import content_text
from hermes_es.store.decoding import decode_row


class HistoryEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One event of a stream, as the audit log shows it."""

    version: int
    position: int
    at: float
    type: str
    actor: str
    summary: str


class DeletionReceipt(msgspec.Struct, frozen=True, kw_only=True):
    """A content-free record of a physical delete."""

    session_id: str
    deleted_at: float
    actor: str
    events: int
    messages: int
    digest: str
    reason: str


def _clip(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _message_line(m: ev.Message) -> str:
    extra = ""
    if m.tool_calls:
        extra = " → " + ", ".join(c.name for c in m.tool_calls)
    return f"#{m.seq} {m.role}: {_clip(content_text(m.content))}{extra}"


def summarize(event: ev.Event) -> str:
    """A one-line, human summary of an event."""
    if isinstance(event, ev.SessionStarted):
        parent = f", {event.parent_kind} of {event.parent_id}" if event.parent_id else ""
        title = f" {event.title!r}" if event.title else ""
        return f"started{title} source={event.source}{parent}"
    if isinstance(event, ev.MessageAppended):
        return _message_line(event.message)
    if isinstance(event, ev.TurnAppended):
        return f"turn of {len(event.messages)}: " + "; ".join(
            _message_line(m) for m in event.messages[:3]
        )
    if isinstance(event, ev.RewoundTo):
        return f"rewound to #{event.seq} ({len(event.removed)} removed)"
    if isinstance(event, ev.MessageEdited):
        text = _clip(content_text(event.message.content))
        return f"edited #{event.target_seq} → #{event.message.seq}: {text}"
    if isinstance(event, ev.CompactedInPlace):
        return (
            f"compacted {len(event.archived)} messages into {len(event.summary)} summary messages"
        )
    if isinstance(event, ev.HistoryImported):
        return f"imported {len(event.messages)} messages from {event.origin or 'a backup'}"
    if isinstance(event, ev.TitleSet):
        return f"title {event.title!r} ({event.kind})" if event.title else "title cleared"
    if isinstance(event, ev.SessionEnded):
        return f"ended ({event.reason})"
    if isinstance(event, ev.SessionContinued):
        return f"continued in {event.child_id}"
    if isinstance(event, ev.SessionArchived | ev.SessionUnarchived):
        verb = "archived" if isinstance(event, ev.SessionArchived) else "unarchived"
        return f"{verb} ({event.reason})"
    if isinstance(event, ev.TokenUsageRecorded):
        return f"usage in={event.tokens_in} out={event.tokens_out} {event.model}".rstrip()
    if isinstance(event, ev.WorkspaceChanged):
        return f"workspace {event.workspace_key}"
    if isinstance(event, ev.ReasoningChanged):
        return f"reasoning {event.level}"
    if isinstance(event, ev.SystemPromptRebuilt):
        return f"system prompt {event.prompt_hash[:12]} ({event.reason})"
    if isinstance(event, ev.ToolsPinned):
        return f"tools pinned: {', '.join(event.tools) or '(none)'}"
    if isinstance(event, ev.SessionHidden):
        return "hidden" if event.hidden else "shown"
    if isinstance(event, ev.TurnAdmitted):
        return f"turn {event.turn} admitted from {event.client_kind}: {_clip(event.text)}"
    if isinstance(event, ev.TurnStarted):
        return f"turn {event.turn} started (epoch {event.epoch})"
    if isinstance(event, ev.TurnFinished):
        error = f": {_clip(event.error)}" if event.error else ""
        return f"turn {event.turn} {event.outcome}{error}"
    if isinstance(event, ev.TurnUnknown):
        return (
            f"turn {event.turn} unknown (started in epoch {event.epoch}, gateway restarted"
            f" as epoch {event.detected_epoch})"
        )
    if isinstance(event, ev.TurnResolved):
        return f"turn {event.turn} resolved ({event.resolution})"
    return event.topic.rsplit(".", 1)[-1].replace("_", " ")


def session_history(conn: apsw.Connection, session_id: str) -> list[HistoryEntry]:
    """Every stored event of a session, oldest first."""
    rows = conn.execute(
        "SELECT id, originator_version, topic, state FROM events WHERE originator_id = ?"
        " ORDER BY originator_version",
        (session_id,),
    ).fetchall()
    out = []
    for position, version, topic, state in rows:
        event = decode_row(topic, state, stream=session_id, version=version, position=position)
        out.append(
            HistoryEntry(
                version=version,
                position=position,
                at=event.at,
                type=topic,
                actor=event.actor,
                summary=summarize(event),
            )
        )
    return out


def deletion_receipts(conn: apsw.Connection, session_id: str) -> list[DeletionReceipt]:
    """Receipts of physical deletes of ``session_id``, oldest first."""
    rows = conn.execute(
        "SELECT session_id, deleted_at, actor, events, messages, digest, reason FROM deletions"
        " WHERE session_id = ? ORDER BY position",
        (session_id,),
    ).fetchall()
    return [
        DeletionReceipt(
            session_id=r[0],
            deleted_at=r[1],
            actor=r[2],
            events=r[3],
            messages=r[4],
            digest=r[5],
            reason=r[6],
        )
        for r in rows
    ]
