"""Resuming from the CLI: which session ``-c``/``-r``/``--in`` mean, and what a resume records.

Resolution rules (the spec's "Resuming Conversations from the CLI"):

- bare ``-c``: this terminal's breadcrumb (unless ``session.terminal_continue: false`` or it is
  missing/stale/gone), else the most recent CLI-history session (cli, tui, oneshot);
- ``-c NAME`` / ``-r REF``: an id, unique prefix or title (the newest ``#N`` lineage variant);
  ``-r latest`` is the most recent CLI-history session;
- with ``--in DIR``, bare ``-c`` and ``-r latest`` pick the latest session of DIR's workspace;
- a session that compression split resumes at the tip of its chain.

A resume picks up the profile's current config (recorded as ``SessionResumed``) but keeps the
session's model, launch flags and any ``/reasoning`` or workspace change.

Picking a session and reading its recorded directory use the read side only (no eventsourcing),
so a resume can reach its first prompt while ``record_resume`` runs on a background thread.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw
import msgspec

from hermes_es.commands.chat import CLI_HISTORY_SOURCES
from hermes_es.config import HermesConfig, changed_pickup_keys, config_fingerprint
from hermes_es.errors import SessionNotFoundError
from hermes_es.queries.lookup import started_event
from hermes_es.queries.resolve import LIST_HINT, chain_tip, latest_session, resolve_session
from hermes_es.workspace import workspace_key

if TYPE_CHECKING:
    from hermes_es.aggregates.state import SessionState
    from hermes_es.commands.engine import SessionEngine

BARE = ""
"""The value of ``-c`` given without a name."""


class Picked(msgspec.Struct, frozen=True, kw_only=True):
    """The session a resume request resolved to, and how."""

    session_id: str
    how: str
    """breadcrumb | latest | workspace | name | ref."""


def pick_session(
    conn: apsw.Connection,
    *,
    continue_name: str | None = None,
    resume_ref: str | None = None,
    in_dir: str | Path | None = None,
    breadcrumb_home: Path | None = None,
    terminal: str | None = None,
    terminal_continue: bool = True,
    now: float | None = None,
) -> Picked:
    """The session (at its compression tip) that ``-c``/``-r``/``--in`` ask for."""
    workspace = workspace_key(in_dir) if in_dir is not None else None
    if continue_name is not None and continue_name.strip():
        return Picked(session_id=chain_tip(conn, resolve_session(conn, continue_name)), how="name")
    if resume_ref is not None and resume_ref.strip() != "latest":
        return Picked(session_id=chain_tip(conn, resolve_session(conn, resume_ref)), how="ref")
    if workspace is not None:
        found = latest_session(conn, sources=CLI_HISTORY_SOURCES, workspace=workspace)
        if found is None:
            raise SessionNotFoundError(
                f"no CLI session belongs to workspace {workspace}; {LIST_HINT}",
                subject=workspace,
            )
        return Picked(session_id=chain_tip(conn, found), how="workspace")
    if continue_name is not None and terminal_continue and terminal and breadcrumb_home:
        from hermes_es.terminal import read_breadcrumb

        crumb = read_breadcrumb(breadcrumb_home, terminal, now=now)
        if crumb and _exists(conn, crumb):
            return Picked(session_id=chain_tip(conn, crumb), how="breadcrumb")
    found = latest_session(conn, sources=CLI_HISTORY_SOURCES)
    if found is None:
        raise SessionNotFoundError(f"there is no CLI session to continue yet; {LIST_HINT}")
    return Picked(session_id=chain_tip(conn, found), how="latest")


def _exists(conn: apsw.Connection, session_id: str) -> bool:
    return bool(conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchall())


def recorded_cwd(conn: apsw.Connection, session_id: str) -> str:
    """The session's recorded working directory, read from the projection ("" when unknown)."""
    rows = conn.execute("SELECT cwd FROM sessions WHERE id = ?", (session_id,)).fetchall()
    return str(rows[0][0] or "") if rows else ""


# --- what the session keeps ------------------------------------------------------------------


def last_pickup(conn: apsw.Connection, session_id: str) -> dict[str, Any]:
    """The config fingerprint the session last ran with (last resume, else its start)."""
    from hermes_es import events as ev

    rows = conn.execute(
        "SELECT state, originator_version, id FROM events WHERE originator_id = ? AND topic = ?"
        " ORDER BY originator_version DESC LIMIT 1",
        (session_id, ev.SessionResumed.topic),
    ).fetchall()
    if rows:
        from hermes_es.store.decoding import decode_row

        state, version, position = rows[0]
        resumed = decode_row(
            ev.SessionResumed.topic, state, stream=session_id, version=version, position=position
        )
        assert isinstance(resumed, ev.SessionResumed)
        return dict(resumed.config)
    started = started_event(conn, session_id)
    if started is None:
        return {}
    pickup = started.model_config.get("pickup")
    return dict(pickup) if isinstance(pickup, Mapping) else {}


def caller_prompt(state: SessionState) -> bool:
    """True when the session runs on a system prompt its creator supplied (an API start with
    ``system_prompt``, a migrated Hermes session) and hermes never rebuilt: a resume's config
    pickup leaves those bytes alone; only ``refresh-prompts`` rebuilds them."""
    supplied_at_start = bool(state.prompt_hash) and state.prompt_version == 1
    return supplied_at_start and (not state.parent_id or bool(state.imported_from))


class Resumed(msgspec.Struct, frozen=True, kw_only=True):
    """What a resume recorded and what the chat should run with."""

    session_id: str
    model: str
    """The session's own model (kept across resumes)."""
    reasoning: str | None
    """The session's ``/reasoning`` level, else the profile's current default."""
    launch_flags: dict[str, Any]
    cwd: str
    """The session's recorded working directory."""
    changed: list[str]
    """Config keys that differ from what the session last ran with."""
    tools_repinned: bool


def record_resume(engine: SessionEngine, session_id: str, config: HermesConfig) -> Resumed:
    """Record a resume with the profile's current config picked up; keep model, flags, reasoning."""
    from hermes_es.commands.prompting import repin_tools_on_resume
    from hermes_es.prompts.tools import tools_for_toolsets

    conn = engine.store.connection()
    fingerprint = config_fingerprint(config)
    before = last_pickup(conn, session_id)
    # A session that never ran under a profile config (started through the API, migrated)
    # has nothing to compare with: this resume records its first fingerprint.
    changed = changed_pickup_keys(before, fingerprint) if before else []
    state = engine.resume(session_id, fingerprint)
    repinned = repin_tools_on_resume(
        engine,
        session_id,
        tools_for_toolsets(config.toolsets),
        toolsets_changed="toolsets" in changed,
    )
    if (
        changed
        and state.prompt_hash
        and not state.refresh_pending
        and not caller_prompt(engine.get(session_id))
    ):
        engine.request_prompt_refresh([session_id])
    started = started_event(conn, session_id)
    return Resumed(
        session_id=session_id,
        model=state.model or config.model.name,
        reasoning=state.reasoning or config.model.reasoning_effort,
        launch_flags=dict(started.launch_flags) if started else {},
        cwd=state.cwd,
        changed=changed,
        tools_repinned=repinned,
    )


# --- working directory -----------------------------------------------------------------------


def restore_cwd(target: str) -> tuple[bool, str]:
    """Change into the session's recorded directory; never raises. Returns (ok, message)."""
    if not target:
        return False, "↪ no workspace dir recorded for this session; staying here"
    try:
        if Path(target).resolve() == Path.cwd().resolve():
            return True, ""
    except OSError:
        pass
    try:
        os.chdir(target)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return False, (
            f"↪ could not restore workspace dir {target} ({reason}); staying in {os.getcwd()}"
        )
    return True, f"↪ restored workspace dir: {target}"


# --- two chats on one session ----------------------------------------------------------------

WRITER_KIND = "chat"
VIEWER_KIND = "chat-viewer"


_LEASES = ("holders", "*.json")
"""Where ``commands.holders`` keeps its lease files (its HOLDERS_DIR), for the fast path."""


def live_writers(db_path: Path, session_id: str) -> list[str]:
    """Descriptions of other live chats writing ``session_id`` (empty when it is free).

    With no lease file at all the holders module (and its socket import) is not loaded.
    """
    directory, pattern = _LEASES
    if not any((Path(db_path).parent / directory).glob(pattern)):
        return []
    from hermes_es.commands.holders import describe, live_holders

    return [
        describe(h)
        for h in live_holders(db_path, exclude_self=True)
        if h.kind == WRITER_KIND and h.session_id == session_id and h.taken_over_by is None
    ]


def take_over(db_path: Path, session_id: str) -> list[str]:
    """Tell every other live chat writing ``session_id`` that this process takes it over.

    Each such chat's lease is marked with this pid (see ``commands.holders``); the chat reads
    the mark before its next write and turns read-only. Call it before recording anything.
    Returns descriptions of the chats marked.
    """
    from hermes_es.commands.holders import describe, mark_taken_over

    command = f"hermes -r {session_id} --take-over"
    marked = mark_taken_over(db_path, session_id, kind=WRITER_KIND, command=command)
    return [describe(h) for h in marked]


# --- pickers ---------------------------------------------------------------------------------


class PickerRow(msgspec.Struct, frozen=True, kw_only=True):
    """One session as ``/sessions`` lists it."""

    session_id: str
    title: str
    source: str
    last_active: float
    preview: str


def picker_sessions(conn: apsw.Connection, *, limit: int = 20) -> list[PickerRow]:
    """Recent live sessions for pickers: one-shot, kanban and tool runs, hidden and archived
    sessions, and compressed-away segments are left out."""
    from hermes_es.commands.chat import PICKER_HIDDEN_SOURCES

    marks = ",".join("?" * len(PICKER_HIDDEN_SOURCES))
    rows = conn.execute(
        "SELECT id, title, source, last_active, preview FROM sessions"
        f" WHERE source NOT IN ({marks}) AND hidden = 0 AND archived = ''"
        " AND continued_into = '' ORDER BY last_active DESC, id DESC LIMIT ?",
        (*PICKER_HIDDEN_SOURCES, limit),
    ).fetchall()
    return [
        PickerRow(
            session_id=str(r[0]),
            title=str(r[1] or ""),
            source=str(r[2]),
            last_active=float(r[3] or 0),
            preview=str(r[4] or ""),
        )
        for r in rows
    ]
