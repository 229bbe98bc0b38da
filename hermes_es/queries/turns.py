"""Reads for the gateway: sessions with turn work, a stream's events since a version, turn texts."""

from __future__ import annotations

from collections.abc import Iterable

import apsw
import msgspec

from hermes_es import events as ev
from hermes_es.aggregates.state import SessionState, decode_state
from hermes_es.queries.listing import turn_states as turn_states
from hermes_es.store.decoding import decode_row


class StreamEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One stored event of a session stream, as the gateway sends it to clients."""

    session_id: str
    sequence: int
    """The event's stream version (a client replays from the last one it saw)."""
    type: str
    """The event's stable topic."""
    at: float
    actor: str
    event: dict[str, object]
    """The event's fields."""


def sessions_with_turns(conn: apsw.Connection, *, running: bool = False) -> list[str]:
    """Sessions with a running turn (``running``), else with any turn work (queued, running
    or unknown): one read of ``turn_work``, as small as the pending work."""
    where = " WHERE running > 0" if running else ""
    rows = conn.execute(f"SELECT session_id FROM turn_work{where} ORDER BY session_id")
    return [str(r[0]) for r in rows.fetchall()]


SWEEP_SQL = (
    "SELECT id FROM sessions WHERE ended = 0 AND +last_active <= ? AND source IN ({marks})"
    " AND id NOT IN (SELECT session_id FROM turn_work) ORDER BY last_active"
)
"""The start-up sweep's read. ``+last_active`` keeps the planner off ``sessions_last_active``
(whose range would cover nearly every session, ended ones included); ordering by
``last_active`` alone then makes the partial index ``sessions_open`` (open sessions only) the
plan on SQLite, whatever the store's size."""


def sweep_candidates(
    conn: apsw.Connection, sources: Iterable[str], idle_before: float
) -> list[str]:
    """Open sessions of ``sources`` last active before ``idle_before`` and with no turn work
    (the gateway's start-up sweep), read through the ``sessions_open`` index."""
    chosen = sorted(set(sources))
    sql = SWEEP_SQL.format(marks=", ".join("?" * len(chosen)))
    return [str(r[0]) for r in conn.execute(sql, (idle_before, *chosen)).fetchall()]


LATER_SQL = (
    "SELECT id, last_active FROM sessions WHERE ended = 0 AND +last_active > ?"
    " AND source IN ({marks}) AND id NOT IN (SELECT session_id FROM turn_work)"
    " ORDER BY last_active"
)
"""The open sessions the start-up sweep leaves for later (active too recently), through the
same ``sessions_open`` plan as ``SWEEP_SQL``."""


def sweep_later(
    conn: apsw.Connection, sources: Iterable[str], idle_before: float
) -> list[tuple[str, float]]:
    """Open sessions of ``sources`` last active after ``idle_before`` with no turn work, and
    when each was last active (what the start-up sweep ends once they have been idle long
    enough)."""
    chosen = sorted(set(sources))
    sql = LATER_SQL.format(marks=", ".join("?" * len(chosen)))
    rows = conn.execute(sql, (idle_before, *chosen)).fetchall()
    return [(str(r[0]), float(r[1])) for r in rows]


def head(conn: apsw.Connection, session_id: str) -> SessionState | None:
    """A session's head state as committed (a plain read), or None. Without its submission
    window (``recent_submissions``): ``admitted_as`` reads it."""
    rows = conn.execute("SELECT head FROM sessions WHERE id = ?", (session_id,)).fetchall()
    return decode_state(rows[0][0]) if rows else None


def admitted_as(conn: apsw.Connection, session_id: str, submission_id: str) -> int:
    """The turn a submission id was admitted as, while its session remembers it, or 0."""
    rows = conn.execute(
        "SELECT turn FROM turn_submissions WHERE session_id = ? AND submission_id = ?",
        (session_id, submission_id),
    ).fetchall()
    return int(rows[0][0]) if rows else 0


def events_since(
    conn: apsw.Connection, session_id: str, after: int, *, limit: int = 10_000
) -> list[StreamEvent]:
    """The session's stored events with a stream version above ``after``, in order."""
    rows = conn.execute(
        "SELECT originator_version, topic, state FROM events WHERE originator_id = ?"
        " AND originator_version > ? ORDER BY originator_version LIMIT ?",
        (session_id, after, limit),
    ).fetchall()
    return [
        stream_event(session_id, int(version), decode_row(topic, state, stream=session_id,
                     version=version), topic)
        for version, topic, state in rows
    ]  # fmt: skip


def stream_event(
    session_id: str, version: int, event: ev.Event, topic: str | None = None
) -> StreamEvent:
    """One event of a session stream as clients receive it (from the log, with its stored
    ``topic``, or as the writer just stored it: the same fields either way)."""
    return StreamEvent(
        session_id=session_id,
        sequence=version,
        type=event.topic if topic is None else topic,
        at=event.at,
        actor=event.actor,
        event=msgspec.to_builtins(event),
    )


def admitted_text(conn: apsw.Connection, session_id: str, turn: int) -> str | None:
    """The prompt text of an admitted turn, from its admission event."""
    rows = conn.execute(
        "SELECT state FROM events WHERE originator_id = ? AND topic = ?"
        " ORDER BY originator_version DESC",
        (session_id, ev.TurnAdmitted.topic),
    ).fetchall()
    for (state,) in rows:
        event = decode_row(ev.TurnAdmitted.topic, state, stream=session_id, version=0)
        if isinstance(event, ev.TurnAdmitted) and event.turn == turn:
            return event.text
    return None
