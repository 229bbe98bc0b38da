"""The JSON/JSONL backup format: one session per object, every stored row with its flags.

A backup line holds the session's metadata (what restoring it needs: source, model, workspace,
lineage, title, flags with an archive's sweep origin, token totals, stored prompt) and every
stored message in display order, each with ``state`` (active, compacted, rewound, edited) and
the derived ``active`` / ``compacted`` flags. Sequence numbers are not written: a restore numbers
rows by their position, so export → import → export gives the same bytes. ``exported_at`` is the
only field that changes between two exports of the same session.

The message list is the last field, so a line can be streamed row by row (``stream_backup``)
and still be byte-identical to encoding the whole object at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

import apsw
import msgspec

from hermes_es import events as ev
from hermes_es.errors import SessionNotFoundError
from hermes_es.queries.lookup import started_event
from hermes_es.redact import redact, redact_value
from hermes_es.store.db import read_transaction

FORMAT = "hermes-es.session/1"
"""Format tag written on every backup object."""

State = Literal["active", "compacted", "rewound", "edited"]
Role = Literal["system", "user", "assistant", "tool"]
Archived = Literal["", "user", "sweep"]


class BackupMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One stored message of a backup, with its transcript state."""

    uid: str = ""
    role: Role
    content: str | list[dict[str, Any]] = ""
    state: State | None = None
    """Absent in old exports: then derived from ``active`` / ``compacted``."""
    active: bool = True
    compacted: bool = False
    tool_calls: list[ev.ToolCall] = []
    tool_call_id: str | None = None
    tool_name: str | None = None
    reasoning: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    media: list[ev.Media] = []
    finish_reason: str | None = None
    at: float = 0.0
    reasoning_content: str | None = None
    token_count: int | None = None

    def resolved_state(self) -> State:
        """The stored state, or the one the legacy flags imply."""
        if self.state is not None:
            return self.state
        if self.active:
            return "active"
        return "compacted" if self.compacted else "rewound"


class BackupSession(msgspec.Struct, frozen=True, kw_only=True):
    """One session of a backup: metadata, then every stored message (always last)."""

    format: str = FORMAT
    exported_at: float = 0.0
    id: str
    source: str = "cli"
    profile: str = "default"
    user_id: str = ""
    platform: str = ""
    chat_id: str = ""
    model: str = ""
    model_config: dict[str, Any] = {}
    launch_flags: dict[str, Any] = {}
    reasoning: str = ""
    title: str = ""
    title_kind: str = ""
    parent_id: str = ""
    parent_kind: str = ""
    continued_into: str = ""
    cwd: str = ""
    workspace_key: str = ""
    started_at: float = 0.0
    ended: bool = False
    end_reason: str = ""
    pinned: bool = False
    archived: Archived = ""
    hidden: bool = False
    tokens_in: int = 0
    tokens_out: int = 0
    tools: list[str] | None = None
    system_prompt: str | None = None
    messages: list[BackupMessage] = []


_ENCODER = msgspec.json.Encoder()
_SESSION_DECODER = msgspec.json.Decoder(BackupSession)
_CALLS = msgspec.json.Decoder(list[ev.ToolCall])
_MEDIA = msgspec.json.Decoder(list[ev.Media])
_PARTS = msgspec.json.Decoder(list[dict[str, Any]])
_TOOLS = msgspec.json.Decoder(list[str])

_META = (
    "SELECT s.source, s.profile, s.user_id, s.model, s.reasoning, s.title, s.title_kind,"
    " s.parent_id, s.parent_kind, s.continued_into, s.cwd, s.workspace_key, s.started_at,"
    " s.ended, s.end_reason, s.pinned, s.archived, s.hidden, s.tokens_in, s.tokens_out,"
    " s.tools, p.text FROM sessions s LEFT JOIN prompts p"
    " ON p.sha256 = s.prompt_hash AND s.prompt_hash <> '' WHERE s.id = ?"
)
_ROWS = (
    "SELECT uid, role, content, parts, state, tool_calls, tool_call_id, tool_name, reasoning,"
    " tokens_in, tokens_out, media, finish_reason, at, reasoning_content, token_count"
    " FROM messages WHERE session_id = ?"
    " ORDER BY ord, seq"
)


def read_meta(conn: apsw.Connection, session_id: str, *, secret: bool = False) -> BackupSession:
    """The session's backup metadata (no messages); ``secret`` redacts its free text."""
    rows = conn.execute(_META, (session_id,)).fetchall()
    if not rows:
        raise SessionNotFoundError(f"no session {session_id!r} to export", subject=session_id)
    r = rows[0]
    started = started_event(conn, session_id)
    prompt = None if r[21] is None else str(r[21])
    meta = BackupSession(
        id=session_id, source=r[0], profile=r[1], user_id=r[2], model=r[3], reasoning=r[4],
        title=r[5], title_kind=r[6], parent_id=r[7], parent_kind=r[8], continued_into=r[9],
        cwd=r[10], workspace_key=r[11], started_at=r[12], ended=bool(r[13]), end_reason=r[14],
        pinned=bool(r[15]), archived=r[16], hidden=bool(r[17]), tokens_in=r[18],
        tokens_out=r[19], tools=_TOOLS.decode(r[20]) if r[20] else None,
        system_prompt=prompt,
        platform=started.platform if started else "",
        chat_id=started.chat_id if started else "",
        model_config=dict(started.model_config) if started else {},
        launch_flags=dict(started.launch_flags) if started else {},
    )  # fmt: skip
    return scrub_meta(meta) if secret else meta


def scrub_meta(meta: BackupSession) -> BackupSession:
    """The metadata with secrets redacted from its free text: title, paths, prompt, settings."""
    config: Any = redact_value(meta.model_config)
    flags: Any = redact_value(meta.launch_flags)
    return msgspec.structs.replace(
        meta,
        title=redact(meta.title),
        cwd=redact(meta.cwd),
        workspace_key=redact(meta.workspace_key),
        end_reason=redact(meta.end_reason),
        system_prompt=redact(meta.system_prompt) if meta.system_prompt else meta.system_prompt,
        model_config=config,
        launch_flags=flags,
    )


def _message(r: tuple[Any, ...]) -> BackupMessage:
    state = str(r[4])
    return BackupMessage(
        uid=r[0], role=r[1], content=_PARTS.decode(r[3]) if r[3] else r[2], state=state,  # type: ignore[arg-type]
        active=state == "active", compacted=state == "compacted",
        tool_calls=_CALLS.decode(r[5]) if r[5] else [], tool_call_id=r[6], tool_name=r[7],
        reasoning=r[8], tokens_in=r[9], tokens_out=r[10],
        media=_MEDIA.decode(r[11]) if r[11] else [], finish_reason=r[12], at=r[13],
        reasoning_content=r[14], token_count=r[15],
    )  # fmt: skip


def scrub(message: BackupMessage) -> BackupMessage:
    """The message with secrets redacted from content, tool calls, tool output and reasoning."""
    content: Any = redact_value(message.content)
    calls = [msgspec.structs.replace(c, arguments=redact(c.arguments)) for c in message.tool_calls]
    media = [
        msgspec.structs.replace(m, text=redact(m.text)) if m.text else m for m in message.media
    ]
    return msgspec.structs.replace(
        message,
        content=content,
        tool_calls=calls,
        media=media,
        reasoning=redact(message.reasoning) if message.reasoning else message.reasoning,
        reasoning_content=(
            redact(message.reasoning_content)
            if message.reasoning_content
            else message.reasoning_content
        ),
    )


def iter_messages(
    conn: apsw.Connection, session_id: str, *, secret: bool = False
) -> Iterator[BackupMessage]:
    """Every stored row of the session in display order, read lazily."""
    for row in conn.execute(_ROWS, (session_id,)):
        message = _message(row)
        yield scrub(message) if secret else message


def count_rows(conn: apsw.Connection, session_id: str) -> int:
    """Every stored message row of a session, archived and inactive ones included."""
    return int(
        conn.execute(
            "SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)
        ).fetchall()[0][0]
    )


def read_backup(
    conn: apsw.Connection, session_id: str, *, redact_secrets: bool = False, at: float = 0.0
) -> BackupSession:
    """The whole backup object of one session (metadata and every stored row)."""
    with read_transaction(conn):
        meta = read_meta(conn, session_id, secret=redact_secrets)
        messages = list(iter_messages(conn, session_id, secret=redact_secrets))
    return msgspec.structs.replace(meta, exported_at=at, messages=messages)


def encode_line(session: BackupSession) -> bytes:
    """One JSONL line (compact JSON and a newline)."""
    return _ENCODER.encode(session) + b"\n"


def encode_pretty(session: BackupSession) -> bytes:
    """One indented JSON document (the ``--format json`` file)."""
    return msgspec.json.format(_ENCODER.encode(session), indent=2) + b"\n"


def stream_backup(
    conn: apsw.Connection,
    session_id: str,
    *,
    redact_secrets: bool = False,
    at: float = 0.0,
    on_row: Callable[[int], None] | None = None,
) -> Iterator[bytes]:
    """Yield the JSONL line of a session in pieces, writing rows as they are read (not capped).

    The concatenated pieces equal ``encode_line(read_backup(...))``; the whole read is one
    snapshot, so rows appended meanwhile are not half-included.
    """
    with read_transaction(conn):
        meta = msgspec.structs.replace(
            read_meta(conn, session_id, secret=redact_secrets), exported_at=at
        )
        head = _ENCODER.encode(meta)
        assert head.endswith(b"[]}")
        yield head[:-2]
        messages = iter_messages(conn, session_id, secret=redact_secrets)
        for done, message in enumerate(messages, 1):
            yield (b"," if done > 1 else b"") + _ENCODER.encode(message)
            if on_row is not None:
                on_row(done)
        yield b"]}\n"


def decode_session(data: bytes | str) -> BackupSession:
    """Decode one backup object (raises ``msgspec.ValidationError`` / ``DecodeError``).

    Messages may also be written as an OpenAI-compatible client writes them (``None`` for absent
    fields, nested tool calls, arguments as objects, ``name`` on tool results): such an object
    is normalized and decoded again. Anything still wrong raises the first decode's error.
    """
    try:
        return _SESSION_DECODER.decode(data)
    except msgspec.ValidationError as first:
        raw = msgspec.json.decode(data)
        if not isinstance(raw, dict) or not isinstance(raw.get("messages"), list):
            raise
        from hermes_es.commands.openai_messages import normalize
        from hermes_es.errors import ValidationError as BadMessage

        try:
            raw["messages"] = [
                normalize(m, f"$.messages[{i}]") if isinstance(m, dict) else m
                for i, m in enumerate(raw["messages"])
            ]
        except BadMessage as exc:
            raise msgspec.ValidationError(exc.message) from first
        try:
            return msgspec.convert(raw, BackupSession)
        except msgspec.ValidationError:
            raise first from None
