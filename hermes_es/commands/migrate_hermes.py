"""``hermes sessions import --from-hermes-db PATH``: turn a Hermes Agent state.db into events.

The source is read through ``read_hermes_db`` (read-only, never written). Each session becomes a
``SessionStarted`` with its original id, start time, source, model, prompt and workspace, its
title, its parent link (delegate / branch / reset from Hermes' lineage markers, else
compression), its messages with their active / compacted / rewound states and tool calls as one
``HistoryImported`` history, its token totals, end, and pinned / archived / hidden flags.

Sessions are written in groups of about 5,000 messages per transaction (``commands.bulk``),
each session in its own savepoint, so a long migration shows progress and a re-run resumes:
sessions whose id already exists are skipped and reported. Sessions above
``sessions.max_import_messages`` are skipped and reported too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from hermes_es import events as ev
from hermes_es.aggregates import session as agg
from hermes_es.aggregates.state import SessionState
from hermes_es.commands.bulk import GroupedUnits
from hermes_es.commands.unit_of_work import Batch, Store
from hermes_es.errors import HermesError
from hermes_es.migrate.hermes_db import HermesDbCounts, LegacyMessage, LegacySession, read_hermes_db
from hermes_es.queries import lookup
from hermes_es.store.decoding import decode_row

_SOURCE_RE = re.compile(r"[a-z][a-z0-9_.-]{0,31}")
_STATES = {"live": "active", "compacted": "compacted", "rewound": "rewound"}


class MigrationReport(msgspec.Struct, kw_only=True):
    """Counts of the source and of what was imported, and every row or session skipped."""

    source: str
    source_counts: HermesDbCounts | None = None
    imported_sessions: int = 0
    imported_messages: int = 0
    already_present: list[str] = []
    updated_sessions: list[str] = []
    """Sessions migrated by an earlier run that got new messages, usage or their end now."""
    over_cap: list[str] = []
    """Sessions not imported because they exceed ``sessions.max_import_messages``."""
    skipped: list[str] = []


def parent_kind(session: LegacySession, parent: LegacySession | None) -> str:
    """The lineage kind of a Hermes child: its marker, its source, or its parent's end reason."""
    config = session.model_config
    if "_delegate_from" in config or session.source == "subagent":
        return "delegate"
    if "_branched_from" in config or (parent is not None and parent.end_reason == "branched"):
        return "branch"
    if "_reset_from" in config or (parent is not None and parent.end_reason == "new_session"):
        return "reset"
    return "compression"


def tool_call(raw: dict[str, Any]) -> ev.ToolCall | None:
    """An OpenAI-style (``function: {name, arguments}``) or flat tool call, or None if unusable."""
    function = raw.get("function")
    fields = function if isinstance(function, dict) else raw
    name = fields.get("name")
    call_id = raw.get("id") or raw.get("call_id")
    if not isinstance(name, str) or not name or not isinstance(call_id, str) or not call_id:
        return None
    arguments = fields.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    kind = raw.get("type")
    if isinstance(kind, str) and kind and kind != "function":
        return ev.ToolCall(id=call_id, name=name, arguments=arguments, type=kind)
    return ev.ToolCall(id=call_id, name=name, arguments=arguments)


def to_message(index: int, m: LegacyMessage, skipped: list[str]) -> ev.Message:
    """One legacy row as a message to restore (its Hermes row id kept as the uid)."""
    calls = []
    for raw in m.tool_calls:
        call = tool_call(raw)
        if call is None:
            skipped.append(f"message row {m.row_id} in {m.session_id}: unusable tool call dropped")
        else:
            calls.append(call)
    return ev.Message(
        seq=index,
        uid=f"hermes:{m.row_id}",
        role=m.role,
        content=m.content,
        tool_calls=calls,
        tool_call_id=m.tool_call_id,
        tool_name=m.tool_name,
        reasoning=m.reasoning,
        reasoning_content=m.reasoning_content,
        token_count=m.token_count,
        finish_reason=m.finish_reason,
        at=m.timestamp,
    )


def _source(raw: str, session_id: str, skipped: list[str]) -> str:
    if _SOURCE_RE.fullmatch(raw):
        return raw
    cleaned = re.sub(r"[^a-z0-9_.-]", "-", raw.lower()).strip("-")[:32]
    fixed = cleaned if _SOURCE_RE.fullmatch(cleaned) else "unknown"
    skipped.append(f"session {session_id}: source {raw!r} stored as {fixed!r}")
    return fixed


class _Migrator:
    def __init__(
        self, units: GroupedUnits, origin: str, actor: str, report: MigrationReport
    ) -> None:
        self.units = units
        self.origin = origin
        self.actor = actor
        self.report = report
        self.sessions: dict[str, LegacySession] = {}

    def migrate(self, s: LegacySession, messages: list[LegacyMessage]) -> None:
        with self.units.unit(len(messages)) as batch:
            state = batch.load(s.id)
            if state.version:
                if state.imported_from != self.origin:
                    self.report.already_present.append(s.id)
                    return
                added = self._grow(batch, state, s, messages)
                if added is None:
                    self.report.already_present.append(s.id)
                else:
                    self.report.updated_sessions.append(s.id)
                    self.report.imported_messages += added
                return
            self._session(batch, s, messages)
        self.report.imported_sessions += 1
        self.report.imported_messages += len(messages)

    def _grow(
        self, batch: Batch, state: SessionState, s: LegacySession, messages: list[LegacyMessage]
    ) -> int | None:
        """Bring an earlier migration of ``s`` up to date; None when nothing was new."""
        now, actor, skipped = batch.now, self.actor, self.report.skipped
        uids = [f"hermes:{m.row_id}" for m in messages]
        known = lookup.seqs_for_uids(batch.conn, s.id, uids) if uids else {}
        fresh = [(i, m) for i, m in enumerate(messages) if uids[i] not in known]
        changed = False
        if fresh:
            rows = [to_message(i, m, skipped) for i, m in fresh]
            states = [_STATES[m.status] for _, m in fresh]
            events = agg.import_history(
                state, rows, states, origin=self.origin, at=now, actor=actor, live=True
            )
            state = batch.record(s.id, events)
            changed = True
        usage = _usage_delta(s, _recorded_usage(batch, s.id))
        if usage is not None:
            batch.record(s.id, [msgspec.structs.replace(usage, at=now, actor=actor)])
            changed = True
        if (s.ended_at is not None or s.end_reason) and not state.ended:
            reason = s.end_reason or "ended"
            batch.record(s.id, agg.end(state, reason, at=s.ended_at or now, actor=actor))
            changed = True
        return len(fresh) if changed else None

    def _prompt(self, batch: Batch, text: str) -> str:
        sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if not lookup.prompt_exists(batch.conn, sha):
            batch.record_other(
                f"prompt:{sha}",
                [ev.PromptStored(at=batch.now, actor=self.actor, sha256=sha, text=text)],
            )
        return sha

    def _session(self, batch: Batch, s: LegacySession, messages: list[LegacyMessage]) -> None:
        now, actor, skipped = batch.now, self.actor, self.report.skipped
        parent = self.sessions.get(s.parent_session_id or "")
        kind = parent_kind(s, parent) if s.parent_session_id else ""
        cwd = s.cwd or ""
        hermes_fields = _hermes_fields(s)
        started = agg.start(
            s.id, at=s.started_at or now, actor=actor, source=_source(s.source, s.id, skipped),
            parent_id=s.parent_session_id or "", parent_kind=kind, user_id=s.user_id or "",
            profile=s.profile_name or "default", model=s.model or "",
            model_config=s.model_config, chat_id=_text(s.extra.get("chat_id")),
            launch_flags={"hermes": hermes_fields} if hermes_fields else {},
            prompt_hash=self._prompt(batch, s.system_prompt) if s.system_prompt else "",
            cwd=cwd, workspace_key=s.git_repo_root or cwd, imported_from=self.origin,
        )  # fmt: skip
        state = batch.record(s.id, started, expected_version=0)
        if s.title:
            owner = lookup.title_owner(batch.conn, s.title)
            if owner and owner != s.id:
                skipped.append(f"session {s.id}: title {s.title!r} is used by {owner}; not set")
            else:
                kind_ = "user" if s.title_source in (None, "user") else "derived"
                batch.record(s.id, agg.set_title(state, s.title, kind=kind_, at=now, actor=actor))
        rows = [to_message(i, m, skipped) for i, m in enumerate(messages)]
        states = [_STATES[m.status] for m in messages]
        if rows:
            events = agg.import_history(
                state, rows, states, origin=self.origin, at=now, actor=actor, live=True
            )
            batch.record(s.id, events)
        usage = _usage_delta(s, None)
        if usage is not None:
            batch.record(s.id, [msgspec.structs.replace(usage, at=now, actor=actor)])
        if s.ended_at is not None or s.end_reason:
            reason = s.end_reason or "ended"
            batch.record(s.id, agg.end(state, reason, at=s.ended_at or now, actor=actor))
        if parent is not None and kind == "compression":
            parent_state = batch.load(parent.id)
            if parent_state.version and not parent_state.continued_into:
                batch.record(parent.id, [ev.SessionContinued(at=now, actor=actor, child_id=s.id)])
        batch.record(s.id, agg.pin(state, s.pinned, at=now, actor=actor))
        if s.archived:
            batch.record(s.id, agg.archive(state, "user", at=now, actor=actor))
        batch.record(s.id, agg.hide(state, s.hidden, at=now, actor=actor))


_MAPPED_EXTRA = frozenset({"chat_id"})
"""Hermes columns kept in their own hermes_es field rather than in ``launch_flags.hermes``."""


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _hermes_fields(s: LegacySession) -> dict[str, Any]:
    """Every Hermes session column hermes_es has no field of its own for, verbatim."""
    fields: dict[str, Any] = {k: v for k, v in s.extra.items() if k not in _MAPPED_EXTRA}
    for name in ("git_branch", "billing_provider", "last_activity_at", "title_source"):
        value = getattr(s, name)
        if value is not None:
            fields[name] = value
    for name in ("message_count", "tool_call_count"):
        if getattr(s, name):
            fields[name] = getattr(s, name)
    return dict(sorted(fields.items()))


_USAGE_FIELDS = (
    ("tokens_in", "input_tokens"),
    ("tokens_out", "output_tokens"),
    ("cache_read_tokens", "cache_read_tokens"),
    ("cache_write_tokens", "cache_write_tokens"),
    ("reasoning_tokens", "reasoning_tokens"),
    ("api_calls", "api_call_count"),
)
_COST_FIELDS = (
    ("estimated_cost_usd", "estimated_cost_usd"),
    ("actual_cost_usd", "actual_cost_usd"),
)


def _recorded_usage(batch: Batch, session_id: str) -> ev.TokenUsageRecorded:
    """The usage recorded outside messages so far (summed), to migrate only what is new."""
    total: dict[str, Any] = {name: 0 for name, _ in _USAGE_FIELDS}
    costs: dict[str, float | None] = {name: None for name, _ in _COST_FIELDS}
    rows = batch.conn.execute(
        "SELECT topic, state, originator_version, id FROM events"
        " WHERE originator_id = ? AND topic = ?",
        (session_id, ev.TokenUsageRecorded.topic),
    ).fetchall()
    for topic, data, version, position in rows:
        event = decode_row(topic, data, stream=session_id, version=version, position=position)
        assert isinstance(event, ev.TokenUsageRecorded)
        for name, _ in _USAGE_FIELDS:
            total[name] += getattr(event, name)
        for name, _ in _COST_FIELDS:
            value = getattr(event, name)
            if value is not None:
                costs[name] = (costs[name] or 0.0) + value
    return ev.TokenUsageRecorded(
        at=0.0,
        tokens_in=total["tokens_in"],
        tokens_out=total["tokens_out"],
        cache_read_tokens=total["cache_read_tokens"],
        cache_write_tokens=total["cache_write_tokens"],
        reasoning_tokens=total["reasoning_tokens"],
        api_calls=total["api_calls"],
        estimated_cost_usd=costs["estimated_cost_usd"],
        actual_cost_usd=costs["actual_cost_usd"],
    )


def _usage_delta(
    s: LegacySession, recorded: ev.TokenUsageRecorded | None
) -> ev.TokenUsageRecorded | None:
    """The source's usage beyond ``recorded`` (None: nothing new)."""
    delta: dict[str, Any] = {}
    for ours, theirs in _USAGE_FIELDS:
        before = getattr(recorded, ours) if recorded is not None else 0
        grown = getattr(s, theirs) - before
        if grown > 0:
            delta[ours] = grown
    for ours, theirs in _COST_FIELDS:
        value = getattr(s, theirs)
        before = getattr(recorded, ours) if recorded is not None else None
        if value is not None and value != (before or 0.0) and (before is None or value > before):
            delta[ours] = value - (before or 0.0)
    if not delta:
        return None
    return msgspec.convert({"at": 0.0, "model": s.model or "", **delta}, ev.TokenUsageRecorded)


def import_hermes_db(
    store: Store,
    path: str | os.PathLike[str],
    *,
    max_messages: int = 20000,
    actor: str = "import",
    progress: Callable[[int, int], None] | None = None,
) -> MigrationReport:
    """Import every session of a Hermes Agent state.db (read-only) as events; report counts."""
    source = Path(path).expanduser()
    origin = f"hermes-db:{source.resolve()}"
    report = MigrationReport(source=str(source))
    tick = progress or (lambda d, t: None)
    with read_hermes_db(source) as db, GroupedUnits(store) as units:
        counts = db.counts()
        report.source_counts = counts
        migrator = _Migrator(units, origin, actor, report)
        done = 0
        for session in db.sessions():
            migrator.sessions[session.id] = session
            messages = list(db.messages(session.id))
            if max_messages > 0 and len(messages) > max_messages:
                report.over_cap.append(session.id)
                report.skipped.append(
                    f"session {session.id}: {len(messages)} messages exceed "
                    f"sessions.max_import_messages = {max_messages}; not imported"
                )
            else:
                try:
                    migrator.migrate(session, messages)
                except HermesError as exc:
                    report.skipped.append(f"session {session.id}: {exc.message}; not imported")
                units.commit_if_due()
            done += len(messages)
            tick(done, counts.messages)
        report.skipped = [*db.skipped, *report.skipped]
    return report
