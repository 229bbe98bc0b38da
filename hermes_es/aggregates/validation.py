"""Input rules shared by the session commands: session ids, roles, content, titles, sources."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

import msgspec

from hermes_es.errors import ValidationError
from hermes_es.events import PARENT_KINDS, ROLES

MAX_TITLE = 100
DEFAULT_MAX_MESSAGE_BYTES = 2 * 1024 * 1024
"""Default per-message size limit (UTF-8 bytes of content, reasoning and tool-call arguments);
``sessions.max_message_bytes`` in config.yaml changes it, 0 turns it off."""
_SOURCE_RE = re.compile(r"[a-z][a-z0-9_.-]{0,31}")
MAX_SESSION_ID = 128
_SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def check_session_id(sid: str) -> str:
    """Return ``sid`` when it is 1-128 of ``A-Za-z0-9_.-``, starting with a letter or digit.

    Colons are refused because ``prompt:`` and ``receipt:`` name other streams; control
    characters, path separators, ``.`` and ``..`` are refused so an id is safe in files and logs.
    """
    if _SESSION_ID_RE.fullmatch(sid) is not None:
        return sid
    if not sid:
        reason = "it is empty"
    elif len(sid) > MAX_SESSION_ID:
        reason = f"it is {len(sid)} characters long; the limit is {MAX_SESSION_ID}"
    elif ":" in sid:
        reason = "':' is reserved for other streams (prompt:, receipt:)"
    elif _has_control(sid):
        reason = "it contains control characters"
    else:
        reason = "use letters, digits, '_', '.', '-', starting with a letter or digit"
    raise ValidationError(f"invalid session id {sid!r}: {reason}", subject=sid[:MAX_SESSION_ID])


def check_role(role: str) -> str:
    """Return ``role`` when it is one of system, user, assistant, tool."""
    if role not in ROLES:
        raise ValidationError(
            f"invalid role {role!r}: expected one of {', '.join(ROLES)}", subject=role
        )
    return role


def content_text(content: str | list[dict[str, Any]]) -> str:
    """The searchable text of plain or structured content."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        text = part.get("text")
        if isinstance(text, str):
            parts.append(text)
    return "\n".join(parts)


def check_title(title: str) -> str:
    """Normalise and validate a title: at most 100 characters, no control characters."""
    check_text(title, "title")
    cleaned = " ".join(title.split()) if not _has_control(title) else None
    if cleaned is None:
        raise ValidationError(
            f"title {title!r} contains control characters; use plain text", subject=title
        )
    if len(cleaned) > MAX_TITLE:
        raise ValidationError(
            f"title is {len(cleaned)} characters long; the limit is {MAX_TITLE}",
            subject=cleaned[:40],
        )
    return cleaned


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) in ("Cc", "Cf") and ch != " " for ch in text)


def check_source(source: str) -> str:
    """Return a source tag when it is short lowercase letters, digits, ``_ . -``."""
    if not _SOURCE_RE.fullmatch(source):
        raise ValidationError(
            f"invalid source tag {source!r}: use lowercase letters, digits, '_', '.', '-'",
            subject=source,
        )
    return source


def check_parent_kind(kind: str) -> str:
    """Return a parent kind when it is compression, branch, delegate or reset."""
    if kind not in PARENT_KINDS:
        raise ValidationError(
            f"invalid parent kind {kind!r}: expected one of {', '.join(PARENT_KINDS)}",
            subject=kind,
        )
    return kind


_ENCODE = msgspec.msgpack.Encoder().encode


def _bad_text(value: object, where: str) -> tuple[str, str, int] | None:
    """(field path, text, index) of the first string under ``value`` that is not valid
    Unicode (a lone surrogate), or None.

    Encoding ``value`` with msgspec checks every string in C (about 2 µs for a message, where
    walking its fields in Python took about 40 µs); only a value that fails to encode is
    walked, to name the field.
    """
    try:
        _ENCODE(value)
    except (UnicodeEncodeError, TypeError, ValueError, OverflowError):
        return _walk_text(value, where)
    return None


def _walk_text(value: object, where: str) -> tuple[str, str, int] | None:
    """``_bad_text`` field by field."""
    if isinstance(value, str):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return where, value, exc.start
        return None
    if isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            found = _walk_text(getattr(value, name), f"{where}.{name}" if where else name)
            if found:
                return found
    elif isinstance(value, Mapping):
        for key, item in value.items():
            found = _walk_text(key, f"{where} key") or _walk_text(item, f"{where}.{key}")
            if found:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _walk_text(item, f"{where}[{index}]")
            if found:
                return found
    return None


_ENCODER = msgspec.msgpack.Encoder()
"""Checks text fast: encoding fails on exactly the strings ``_bad_text`` finds (the walk then
names the field)."""


def check_text(value: object, where: str = "") -> None:
    """Refuse any string under ``value`` (a str, a Struct such as an event, a dict or a list)
    that is not valid Unicode: a lone surrogate cannot be stored, searched or exported.

    The error names the field and the character position, e.g. ``message.content``.
    """
    try:
        _ENCODER.encode(value)  # in C: it refuses a lone surrogate wherever it sits
    except Exception:  # a surrogate, or a value it cannot encode: the walk decides
        pass
    else:
        return
    found = _bad_text(value, where)
    if found is None:
        return
    field, text, index = found
    code = ord(text[index])
    raise ValidationError(
        f"{field or 'text'} is not valid Unicode: a lone surrogate U+{code:04X} at character "
        f"{index}; send UTF-8 text (nothing was written)",
        subject=field,
    )


def message_bytes(content: str | list[dict[str, Any]], reasoning: str | None, calls: str) -> int:
    """The size a message counts against the limit: UTF-8 bytes of its text, its reasoning and
    its tool-call arguments."""
    text = content_text(content)
    total = len(text.encode("utf-8", "surrogatepass")) + len(calls.encode("utf-8", "surrogatepass"))
    if reasoning:
        total += len(reasoning.encode("utf-8", "surrogatepass"))
    return total


def check_message_size(size: int, limit: int, where: str) -> None:
    """Refuse a message larger than ``limit`` bytes (``limit`` 0 means no limit)."""
    if limit and size > limit:
        raise ValidationError(
            f"{where} is {size:,} bytes; the limit is {limit:,} bytes per message"
            " (sessions.max_message_bytes in config.yaml; 0 turns it off); nothing was written",
            subject=where,
        )
