"""Read side of stored system prompts: who holds one, its hash, tools pin and refresh flag."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apsw
import msgspec

from hermes_es.prompts.repair import parse_tools_pin

_COLUMNS = (
    "id, title, source, prompt_hash, prompt_version, refresh_pending, tools, last_active, ended"
)


class PromptRow(msgspec.Struct, frozen=True, kw_only=True):
    """One session's stored-prompt bookkeeping, as the ``sessions`` projection holds it."""

    session_id: str
    title: str
    source: str
    prompt_hash: str
    """SHA-256 of the stored prompt; empty when the session holds none."""
    prompt_version: int
    refresh_pending: bool
    tools_raw: str | None
    """The tools pin exactly as stored (JSON text), or None when never pinned."""
    tools: list[str] | None
    """The decoded tools pin; None when missing or unreadable."""
    last_active: float
    ended: bool


def _row(values: tuple[Any, ...]) -> PromptRow:
    """Build a PromptRow from a ``_COLUMNS`` result row."""
    sid, title, source, sha, version, pending, tools, last_active, ended = values
    raw = None if tools is None else str(tools)
    return PromptRow(
        session_id=str(sid),
        title=str(title or ""),
        source=str(source or ""),
        prompt_hash=str(sha or ""),
        prompt_version=int(version or 0),
        refresh_pending=bool(pending),
        tools_raw=raw,
        tools=parse_tools_pin(raw),
        last_active=float(last_active or 0.0),
        ended=bool(ended),
    )


def prompt_rows(conn: apsw.Connection, session_ids: Iterable[str] | None = None) -> list[PromptRow]:
    """Prompt bookkeeping of every session (or of ``session_ids``), oldest first."""
    sql = f"SELECT {_COLUMNS} FROM sessions"
    params: list[object] = []
    if session_ids is not None:
        ids = list(session_ids)
        if not ids:
            return []
        sql += f" WHERE id IN ({','.join('?' * len(ids))})"
        params.extend(ids)
    sql += " ORDER BY started_at, id"
    return [_row(tuple(values)) for values in conn.execute(sql, params).fetchall()]


def sessions_holding_prompt(conn: apsw.Connection) -> list[str]:
    """Ids of the sessions that hold a stored prompt, oldest first."""
    rows = conn.execute(
        "SELECT id FROM sessions WHERE prompt_hash <> '' ORDER BY started_at, id"
    ).fetchall()
    return [str(sid) for (sid,) in rows]


def prompt_texts(conn: apsw.Connection, hashes: Iterable[str]) -> dict[str, str]:
    """The stored texts of the given prompt hashes (missing hashes are simply absent)."""
    wanted = sorted({sha for sha in hashes if sha})
    found: dict[str, str] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        rows = conn.execute(
            f"SELECT sha256, text FROM prompts WHERE sha256 IN ({','.join('?' * len(chunk))})",
            chunk,
        ).fetchall()
        found.update((str(sha), str(text)) for sha, text in rows)
    return found
