"""Small reads of the projection tables that commands need inside their transaction."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import apsw

from hermes_es.projections.messages import GENERATED_UID_LENGTH, by_seq_args

if TYPE_CHECKING:
    from hermes_es.events import SessionStarted


def was_deleted(conn: apsw.Connection, session_id: str) -> bool:
    """True when a delete receipt exists for ``session_id``."""
    return bool(
        conn.execute(
            "SELECT 1 FROM deletions WHERE session_id = ? LIMIT 1", (session_id,)
        ).fetchall()
    )


def prompt_exists(conn: apsw.Connection, sha: str) -> bool:
    """True when the prompt text with this hash is stored."""
    return bool(conn.execute("SELECT 1 FROM prompts WHERE sha256 = ?", (sha,)).fetchall())


def prompt_text(conn: apsw.Connection, sha: str) -> str | None:
    """The stored prompt text with this hash."""
    rows = conn.execute("SELECT text FROM prompts WHERE sha256 = ?", (sha,)).fetchall()
    return str(rows[0][0]) if rows else None


def title_owner(conn: apsw.Connection, title: str) -> str | None:
    """The session that holds ``title`` (case-insensitive), if any."""
    rows = conn.execute(
        "SELECT id FROM sessions WHERE title = ? COLLATE NOCASE AND title <> ''", (title,)
    ).fetchall()
    return str(rows[0][0]) if rows else None


_VARIANT = re.compile(r"(?P<base>.*?) #(?P<n>\d+)")


def base_title(title: str) -> str:
    """``my project`` for ``my project #3``."""
    m = _VARIANT.fullmatch(title)
    return m.group("base") if m else title


def next_lineage_title(conn: apsw.Connection, title: str) -> str:
    """The next free ``#N`` variant of a title's base (``my project #2``, ``#3``, …)."""
    base = base_title(title)
    rows = conn.execute(
        "SELECT title FROM sessions WHERE title = ? COLLATE NOCASE OR title LIKE ? ESCAPE '\\'",
        (base, like_escape(base) + " #%"),
    ).fetchall()
    highest = 1
    for (t,) in rows:
        m = _VARIANT.fullmatch(str(t))
        if m and m.group("base").lower() == base.lower():
            highest = max(highest, int(m.group("n")))
    return f"{base} #{highest + 1}"


def like_escape(text: str) -> str:
    """Escape ``\\``, ``%`` and ``_`` for a ``LIKE … ESCAPE '\\'`` pattern."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def seqs_for_uids(conn: apsw.Connection, session_id: str, uids: Sequence[str]) -> dict[str, int]:
    """Sequence numbers of already-stored messages with these uids.

    The ``messages_uid`` index holds only uids whose length is not that of a generated one
    (``GENERATED_UID_LENGTH``); a uid of that length is looked for among the session's rows.
    """
    found: dict[str, int] = {}
    indexed = [u for u in uids if len(u) != GENERATED_UID_LENGTH]
    others = [u for u in uids if len(u) == GENERATED_UID_LENGTH]
    for group, extra in ((indexed, f" AND length(uid) <> {GENERATED_UID_LENGTH}"), (others, "")):
        if not group:
            continue
        marks = ",".join("?" * len(group))
        rows = conn.execute(
            f"SELECT uid, seq FROM messages WHERE session_id = ? AND uid IN ({marks}){extra}",
            (session_id, *group),
        ).fetchall()
        found.update({str(u): int(s) for u, s in rows})
    return found


def active_user_seqs(conn: apsw.Connection, session_id: str) -> list[int]:
    """Sequence numbers of the active user messages, in display order."""
    rows = conn.execute(
        "SELECT seq FROM messages WHERE session_id = ? AND state = 'active' AND imported = 0"
        " AND role = 'user' ORDER BY ord, seq",
        (session_id,),
    ).fetchall()
    return [int(r[0]) for r in rows]


def role_of(conn: apsw.Connection, session_id: str, seq: int) -> str | None:
    """The role of message ``seq``."""
    rows = conn.execute(
        "SELECT role FROM messages WHERE session_id = ? AND ord = ? AND seq = ?"
        " UNION ALL SELECT role FROM messages WHERE session_id = ? AND seq = ? AND ord <> seq",
        by_seq_args(session_id, seq),
    ).fetchall()
    return str(rows[0][0]) if rows else None


def delegates_of(conn: apsw.Connection, session_id: str) -> list[str]:
    """Direct delegate (subagent) children of a session."""
    rows = conn.execute(
        "SELECT child_id FROM lineage WHERE parent_id = ? AND kind = 'delegate' ORDER BY child_id",
        (session_id,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def display_rows(conn: apsw.Connection, session_id: str) -> list[tuple[int, str, str]]:
    """(seq, role, content) of the display transcript, in display order."""
    rows = conn.execute(
        "SELECT seq, role, content FROM messages WHERE session_id = ?"
        " AND state IN ('active', 'compacted') ORDER BY ord, seq",
        (session_id,),
    ).fetchall()
    return [(int(a), str(b), str(c)) for a, b, c in rows]


def started_event(conn: apsw.Connection, session_id: str) -> SessionStarted | None:
    """The session's ``SessionStarted`` event (model config and launch flags live there)."""
    from hermes_es import events as ev
    from hermes_es.store.decoding import decode_row

    rows = conn.execute(
        "SELECT topic, state, id FROM events WHERE originator_id = ? AND originator_version = 1",
        (session_id,),
    ).fetchall()
    if not rows:
        return None
    event = decode_row(rows[0][0], rows[0][1], stream=session_id, version=1, position=rows[0][2])
    return event if isinstance(event, ev.SessionStarted) else None
