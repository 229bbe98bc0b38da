"""Input rules shared by the session commands: session ids, roles, content, titles, sources."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from hermes_es.errors import ValidationError
from hermes_es.events import PARENT_KINDS, ROLES

MAX_TITLE = 100
_SOURCE_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,31}$")
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
    if not _SOURCE_RE.match(source):
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
