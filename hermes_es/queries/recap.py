"""The conversation recap shown on resume: the last exchanges, user and assistant text only.

Rules: at most the last ``exchanges`` exchanges (an exchange starts at a user message); user and
assistant text, each truncated to ``max_chars``; an assistant's tool calls collapse to a count
with the tool names; system messages and tool results are hidden. Only the tail of the display
history is read, so a 20,000-message session recaps as fast as a short one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw
import msgspec

DEFAULT_EXCHANGES = 10
DEFAULT_MAX_CHARS = 300
ELLIPSIS = "…"

_JSON = msgspec.json.Decoder()
_DISPLAY = "state IN ('active', 'compacted')"


class RecapLine(msgspec.Struct, frozen=True, kw_only=True):
    """One line of the recap: who spoke, what they said (truncated), and tool calls collapsed."""

    role: str
    """user | assistant."""
    text: str
    """The message text, whitespace-collapsed and truncated."""
    truncated: bool = False
    """True when ``text`` was cut."""
    tool_count: int = 0
    """How many tool calls the assistant message made."""
    tool_names: list[str] = []
    """Distinct tool names called, in first-call order."""

    @property
    def tools_label(self) -> str:
        """``[2 tool calls: echo, word_count]`` or ``""``."""
        if not self.tool_count:
            return ""
        noun = "tool call" if self.tool_count == 1 else "tool calls"
        return f"[{self.tool_count} {noun}: {', '.join(self.tool_names)}]"


class Recap(msgspec.Struct, frozen=True, kw_only=True):
    """The recap of one session."""

    session_id: str
    title: str
    lines: list[RecapLine]
    exchanges: int
    """Exchanges shown."""
    total_messages: int
    """Messages in the display history."""


def truncate(text: str, max_chars: int) -> tuple[str, bool]:
    """Collapse whitespace and cut to ``max_chars`` characters (ellipsis included)."""
    flat = " ".join(text.split())
    if len(flat) <= max_chars:
        return flat, False
    return flat[: max(0, max_chars - 1)].rstrip() + ELLIPSIS, True


def _start_ord(conn: apsw.Connection, session_id: str, exchanges: int) -> int | None:
    """Display order of the first user message of the last ``exchanges`` exchanges."""
    rows = conn.execute(
        f"SELECT ord FROM messages WHERE session_id = ? AND {_DISPLAY} AND role = 'user'"
        " ORDER BY ord DESC, seq DESC LIMIT 1 OFFSET ?",
        (session_id, exchanges - 1),
    ).fetchall()
    return int(rows[0][0]) if rows else None


def _line(
    role: str, content: str, tool_calls: Sequence[dict[str, Any]], max_chars: int
) -> RecapLine:
    names: list[str] = []
    for call in tool_calls:
        name = str(call.get("name") or call.get("function", {}).get("name") or "?")
        if name not in names:
            names.append(name)
    text, cut = truncate(content, max_chars)
    return RecapLine(
        role=role, text=text, truncated=cut, tool_count=len(tool_calls), tool_names=names
    )


def recap_lines(
    conn: apsw.Connection,
    session_id: str,
    *,
    exchanges: int = DEFAULT_EXCHANGES,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> list[RecapLine]:
    """The recap lines of a session (oldest first), following the recap rules."""
    if exchanges <= 0:
        return []
    start = _start_ord(conn, session_id, exchanges)
    sql = (
        "SELECT role, content, tool_calls FROM messages WHERE session_id = ? AND "
        f"{_DISPLAY} AND role IN ('user', 'assistant')"
    )
    params: list[object] = [session_id]
    if start is not None:
        sql += " AND ord >= ?"
        params.append(start)
    rows = conn.execute(sql + " ORDER BY ord, seq", params).fetchall()
    lines: list[RecapLine] = []
    for role, content, calls_json in rows:
        calls = _JSON.decode(calls_json) if calls_json else []
        if role == "assistant" and not (content or "").strip() and not calls:
            continue
        lines.append(_line(str(role), str(content or ""), calls, max_chars))
    return lines


def session_recap(
    conn: apsw.Connection,
    session_id: str,
    *,
    exchanges: int = DEFAULT_EXCHANGES,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> Recap:
    """The recap of ``session_id`` with its title and display-message count."""
    rows = conn.execute(
        "SELECT title, active_count + compacted_count FROM sessions WHERE id = ?", (session_id,)
    ).fetchall()
    title, total = (str(rows[0][0]), int(rows[0][1])) if rows else ("", 0)
    lines = recap_lines(conn, session_id, exchanges=exchanges, max_chars=max_chars)
    shown = sum(1 for line in lines if line.role == "user")
    return Recap(
        session_id=session_id,
        title=title,
        lines=lines,
        exchanges=shown,
        total_messages=total,
    )
