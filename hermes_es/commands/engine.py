"""``SessionEngine``: the public Python API. One method per use case, one transaction each."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from hermes_es import events as ev
from hermes_es.aggregates import session as agg
from hermes_es.aggregates.state import SessionState
from hermes_es.aggregates.validation import DEFAULT_MAX_MESSAGE_BYTES, check_text
from hermes_es.commands.openai_messages import normalize, send_order, to_openai
from hermes_es.commands.unit_of_work import Batch, Store
from hermes_es.errors import (
    HermesError,
    InvariantError,
    SessionNotFoundError,
    StoreError,
    ValidationError,
)
from hermes_es.ids import unused_session_id
from hermes_es.queries import lookup
from hermes_es.queries.listing import DEFAULT_HIDDEN_SOURCES
from hermes_es.queries.resolve import resolve_session
from hermes_es.queries.search import SearchHit, search_messages
from hermes_es.store.backend import StoreBackend, is_postgres_url, open_backend, redact_url
from hermes_es.workspace import workspace_key

MessageLike = ev.Message | Mapping[str, Any]


def db_path_for(home_or_db: str | Path, profile: str | None = None) -> Path:
    """``state.db`` inside a HERMES_HOME (or profile), or the given ``.db`` file itself."""
    path = Path(home_or_db).expanduser()
    if path.suffix == ".db" or path.is_file():
        return path
    if profile and profile != "default":
        return path / "profiles" / profile / "state.db"
    return path / "state.db"


_MESSAGE_FIELDS = frozenset(ev.Message.__struct_fields__)


def to_draft(message: MessageLike) -> ev.Message:
    """A message draft from a Message or a plain mapping (validated by msgspec).

    A mapping may be written as an OpenAI-compatible client writes it (``None`` for absent
    fields, nested tool calls with object or string arguments, ``name`` on tool results): see
    ``hermes_es.commands.openai_messages.normalize``.
    """
    if isinstance(message, ev.Message):
        return message
    data = normalize(message)
    unknown = sorted(set(data) - _MESSAGE_FIELDS)
    if unknown:
        raise ValidationError(
            f"invalid message: unknown field(s) {', '.join(unknown)}; expected some of "
            f"{', '.join(sorted(_MESSAGE_FIELDS - {'seq'}))}",
            subject=unknown[0],
        )
    data.setdefault("seq", -1)
    data.setdefault("uid", "")
    try:
        return msgspec.convert(data, ev.Message)
    except msgspec.ValidationError as exc:
        raise ValidationError(f"invalid message: {exc}") from exc


def prompt_sha(text: str) -> str:
    """Content address of a stored prompt."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class SessionEngine:
    """Record, resume, search and curate sessions in one state.db."""

    def __init__(
        self,
        target: StoreBackend | Path | str,
        *,
        clock: Callable[[], float] = time.time,
        actor: str = "",
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        """``target``: a backend, a state.db path, or a ``postgresql://`` URL."""
        self.backend = target if isinstance(target, StoreBackend) else open_backend(target)
        self.db_path = self.backend.lease_path
        """Where holder leases are kept (the state.db itself on SQLite)."""
        self.store: Store = self.backend.store(clock=clock)
        self.actor = actor
        self.max_message_bytes = max_message_bytes
        """Per-message size limit in UTF-8 bytes (0 = none); appends and edits over it fail."""
        self.store.connection()

    @classmethod
    def open(
        cls,
        home_or_db: str | Path,
        *,
        profile: str | None = None,
        clock: Callable[[], float] = time.time,
        actor: str = "",
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> SessionEngine:
        """Open (creating when needed) the store in a HERMES_HOME, a profile, a .db file, or the
        PostgreSQL database a ``postgresql://`` URL names.

        Every failure is a ``HermesError``: ``ValidationError`` for a path that cannot name a
        file, ``StoreError`` for a store that cannot be opened (missing directory, no
        permission, not a database, damaged, unreachable server).
        """
        target: Path | str
        try:
            if is_postgres_url(home_or_db):
                target = str(home_or_db)
            else:
                target = db_path_for(home_or_db, profile)
                os.fspath(target).encode()
                if "\0" in os.fspath(target):
                    raise ValueError("embedded NUL character")
        except (RuntimeError, ValueError, TypeError) as exc:
            raise ValidationError(
                f"cannot use {home_or_db!r} as a HERMES_HOME or state.db: {exc}",
                subject=str(home_or_db),
            ) from exc
        try:
            return cls(target, clock=clock, actor=actor, max_message_bytes=max_message_bytes)
        except HermesError:
            raise
        except Exception as exc:  # SQLite, PostgreSQL, eventsourcing or OS errors
            shown = redact_url(target) if isinstance(target, str) else str(target)
            raise StoreError(
                f"cannot open the session store {shown}: {exc}", subject=shown
            ) from exc

    def close(self) -> None:
        """Close the store's connections."""
        self.store.close()

    def __enter__(self) -> SessionEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers -----------------------------------------------------------------------------

    def _existing(self, batch: Batch, session_id: str) -> SessionState:
        state = batch.load(session_id)
        if state.version == 0:
            if lookup.was_deleted(batch.conn, session_id):
                raise InvariantError(
                    f"session {session_id} was deleted (its receipt: 'hermes sessions history "
                    f"{session_id}'); it cannot be read or changed",
                    subject=session_id,
                )
            raise SessionNotFoundError(
                f"no session {session_id!r}; run 'hermes sessions list' to see sessions",
                subject=session_id,
            )
        return state

    def _store_prompt(self, batch: Batch, text: str) -> str:
        sha = prompt_sha(text)
        if not lookup.prompt_exists(batch.conn, sha):
            batch.record_other(
                f"prompt:{sha}",
                [ev.PromptStored(at=batch.now, actor=self.actor, sha256=sha, text=text)],
            )
        return sha

    def _fresh_id(self, batch: Batch, source: str) -> str:
        """A generated id no session (live or deleted) has used: retried with a fresh suffix."""

        def taken(sid: str) -> bool:
            return bool(batch.load(sid).version) or lookup.was_deleted(batch.conn, sid)

        try:
            return unused_session_id(source, batch.now, taken)
        except RuntimeError as exc:
            raise StoreError(f"could not generate a session id: {exc}") from exc

    def _check_title_free(self, batch: Batch, title: str, session_id: str) -> None:
        owner = lookup.title_owner(batch.conn, title)
        if owner and owner != session_id:
            raise ValidationError(
                f"title {title!r} is already used by session {owner}", subject=title
            )

    # -- sessions ----------------------------------------------------------------------------

    def start_session(
        self,
        source: str = "cli",
        *,
        session_id: str | None = None,
        title: str = "",
        user_id: str = "",
        platform: str = "",
        chat_id: str = "",
        profile: str = "default",
        model: str = "",
        model_config: Mapping[str, Any] | None = None,
        launch_flags: Mapping[str, Any] | None = None,
        system_prompt: str | None = None,
        tools: Sequence[str] | None = None,
        cwd: str | None = None,
        parent_id: str = "",
        parent_kind: str = "",
        imported_from: str = "",
        create_id: str = "",
    ) -> str:
        """Create a session and return its id. ``create_id`` (a client's id for this
        creation, ``commands.create_claims``) is claimed in the same transaction: a creation
        whose id is already claimed raises ``CreateClaimedError`` and changes nothing."""
        from hermes_es.commands import create_claims as claims

        with self.store.transaction() as batch:
            claim = claims.claim_stream(claims.check_create_id(create_id)) if create_id else ""
            if claim and batch.version_of(claim):
                raise claims.CreateClaimedError(
                    f"create id {create_id!r} already made a session",
                    subject=create_id,
                    expected=0,
                    actual=batch.version_of(claim),
                )
            if session_id:
                sid = session_id
                if batch.load(sid).version:
                    raise ValidationError(f"session {sid} already exists", subject=sid)
            else:
                sid = self._fresh_id(batch, source)
            if parent_id:
                self._existing(batch, parent_id)
            work = cwd if cwd is not None else os.getcwd()
            prompt_hash = self._store_prompt(batch, system_prompt) if system_prompt else ""
            events = agg.start(
                sid,
                at=batch.now,
                actor=self.actor,
                source=source,
                title=title,
                parent_id=parent_id,
                parent_kind=parent_kind,
                user_id=user_id,
                platform=platform,
                chat_id=chat_id,
                profile=profile,
                model=model,
                model_config=dict(model_config or {}),
                launch_flags=dict(launch_flags or {}),
                prompt_hash=prompt_hash,
                tools=list(tools) if tools is not None else None,
                cwd=work,
                workspace_key=workspace_key(work) if work else "",
                imported_from=imported_from,
                create_id=create_id,
            )
            started = events[0]
            assert isinstance(started, ev.SessionStarted)
            if started.title:
                self._check_title_free(batch, started.title, sid)
            batch.record(sid, events, expected_version=0)
            if claim:
                batch.record_other(
                    claim,
                    [
                        ev.SessionCreateClaimed(
                            at=batch.now, actor=self.actor, create_id=create_id, session_id=sid
                        )
                    ],
                )
        return sid

    def get(self, session_id: str) -> SessionState:
        """The folded state of a session (from its head row: O(1) in transcript length)."""
        with self.store.transaction() as batch:
            return self._existing(batch, session_id)

    def resolve(self, ref: str) -> str:
        """A session id from a full id, a unique prefix, a title (newest variant) or ``latest``."""
        return resolve_session(self.store.connection(), ref)

    # -- messages ----------------------------------------------------------------------------

    def messages(
        self, session_id: str, *, format: str = "openai", system_prompt: bool = False
    ) -> list[dict[str, Any]]:
        """The session's active window as chat-completions messages, ready to send.

        ``format="openai"`` is the only format: each message as ``to_openai`` gives it (nested
        tool calls with their type, ``content: null`` on tool-call-only assistant messages,
        ``name`` on tool results), tool results right after their call. With
        ``system_prompt`` the session's stored system prompt comes first, as a turn sends it.
        A list appended with ``append_turn`` comes back equal to itself.
        """
        from hermes_es.queries.transcript import messages_of

        if format != "openai":
            raise ValidationError(
                f"unknown message format {format!r}; the only format is 'openai'", subject=format
            )
        state = self.get(session_id)
        conn = self.store.connection()
        window = [to_openai(m) for m in messages_of(conn, session_id, scope="context")]
        out: list[dict[str, Any]] = []
        if system_prompt and state.prompt_hash:
            text = lookup.prompt_text(conn, state.prompt_hash)
            if text:
                out.append({"role": "system", "content": text})
        out.extend(send_order(window))
        return out

    def append_message(
        self,
        session_id: str,
        role: str,
        content: str | list[dict[str, Any]] | None,
        *,
        expected_version: int | None = None,
        **fields: Any,
    ) -> int:
        """Append one message; returns its sequence number (the same one on a uid retry)."""
        draft = to_draft({"role": role, "content": content, **fields})
        return self.append_turn(session_id, [draft], expected_version=expected_version)[0]

    def append_turn(
        self,
        session_id: str,
        messages: Iterable[MessageLike],
        *,
        expected_version: int | None = None,
    ) -> list[int]:
        """Append a whole turn atomically; returns the sequence numbers."""
        drafts = [to_draft(m) for m in messages]
        with self.store.transaction() as batch:
            state = self._existing(batch, session_id)
            uids = [d.uid for d in drafts if d.uid]
            if uids:
                known = lookup.seqs_for_uids(batch.conn, session_id, uids)
                if known and len(known) == len(drafts) == len(uids):
                    return [known[u] for u in uids]
                if known:
                    raise ValidationError(
                        "turn mixes already-stored uids "
                        f"({', '.join(sorted(known))}) with new ones",
                        subject=session_id,
                    )
            events = agg.append(
                state, drafts, at=batch.now, actor=self.actor, max_bytes=self.max_message_bytes
            )
            before = state.next_seq
            batch.record(session_id, events, expected_version=expected_version)
            return list(range(before, before + len(drafts)))

    def record_usage(
        self, session_id: str, tokens_in: int, tokens_out: int, model: str = ""
    ) -> None:
        """Record token usage billed outside a stored message."""
        with self.store.transaction() as batch:
            self._existing(batch, session_id)
            batch.record(
                session_id,
                [
                    ev.TokenUsageRecorded(
                        at=batch.now,
                        actor=self.actor,
                        tokens_in=tokens_in,
                        tokens_out=tokens_out,
                        model=model,
                    )
                ],
            )

    def rewind(
        self, session_id: str, seq: int, *, expected_version: int | None = None
    ) -> list[int]:
        """Remove every active message after ``seq``; returns the removed sequence numbers."""
        with self.store.transaction() as batch:
            state = self._existing(batch, session_id)
            events = agg.rewind(state, seq, at=batch.now, actor=self.actor)
            batch.record(session_id, events, expected_version=expected_version)
            return list(events[0].removed) if events and isinstance(events[0], ev.RewoundTo) else []

    def rewind_turns(self, session_id: str, turns: int = 1) -> list[int]:
        """Remove the last ``turns`` user turns (and everything after them)."""
        with self.store.transaction() as batch:
            state = self._existing(batch, session_id)
            target = agg.rewind_turns(state, lookup.active_user_seqs(batch.conn, session_id), turns)
            if target is None:
                raise InvariantError(
                    f"session {session_id} has fewer than {turns} user turns to rewind",
                    subject=session_id,
                )
            events = agg.rewind(state, target, at=batch.now, actor=self.actor)
            batch.record(session_id, events)
            return [s for e in events if isinstance(e, ev.RewoundTo) for s in e.removed]

    def edit_message(
        self, session_id: str, seq: int, content: str | list[dict[str, Any]] | None, **fields: Any
    ) -> int:
        """Replace message ``seq``; returns the replacement's sequence number."""
        with self.store.transaction() as batch:
            state = self._existing(batch, session_id)
            role = lookup.role_of(batch.conn, session_id, seq) or "user"
            draft = to_draft({"role": fields.pop("role", role), "content": content, **fields})
            events = agg.edit(
                state, seq, draft, at=batch.now, actor=self.actor, max_bytes=self.max_message_bytes
            )
            new_seq = state.next_seq
            batch.record(session_id, events)
            return new_seq

    def compact(
        self, session_id: str, archived: Sequence[int], summary: Sequence[MessageLike]
    ) -> list[int]:
        """Compact in place: archive ``archived`` and add ``summary``; returns the summary seqs."""
        drafts = [to_draft(m) for m in summary]
        with self.store.transaction() as batch:
            state = self._existing(batch, session_id)
            events = agg.compact(state, archived, drafts, at=batch.now, actor=self.actor)
            first = state.next_seq
            batch.record(session_id, events)
            return list(range(first, first + len(drafts)))

    def continue_session(
        self,
        session_id: str,
        summary: Sequence[MessageLike],
        *,
        carry: Sequence[MessageLike] = (),
        child_id: str | None = None,
    ) -> str:
        """Split by compression: end the session and continue in a child that inherits its source.

        The child starts with ``summary`` and the ``carry`` messages (the kept tail), gets the
        next free ``#N`` lineage title when the parent has a title, and inherits prompt, tools,
        model and model config (with the current reasoning effort), launch flags, platform and
        chat id, and workspace.
        """
        drafts = [to_draft(m) for m in [*summary, *carry]]
        with self.store.transaction() as batch:
            parent = self._existing(batch, session_id)
            cid = child_id or self._fresh_id(batch, parent.source)
            origin = lookup.started_event(batch.conn, session_id)
            model_config = dict(origin.model_config) if origin is not None else {}
            model_config.pop("reasoning_effort", None)
            if parent.reasoning:
                model_config["reasoning_effort"] = parent.reasoning
            title = ""
            if parent.title:
                title = lookup.next_lineage_title(batch.conn, parent.title)
            batch.record(session_id, agg.continue_into(parent, cid, at=batch.now, actor=self.actor))
            started = agg.start(
                cid,
                at=batch.now,
                actor=self.actor,
                source=parent.source,
                parent_id=session_id,
                parent_kind="compression",
                profile=parent.profile,
                user_id=parent.user_id,
                platform=origin.platform if origin is not None else "",
                chat_id=origin.chat_id if origin is not None else "",
                model=parent.model,
                model_config=model_config,
                launch_flags=dict(origin.launch_flags) if origin is not None else {},
                prompt_hash=parent.prompt_hash,
                tools=parent.tools,
                cwd=parent.cwd,
                workspace_key=parent.workspace_key,
            )
            child = batch.record(cid, started, expected_version=0)
            if title:
                batch.record(
                    cid, agg.set_title(child, title, kind="lineage", at=batch.now, actor=self.actor)
                )
            if drafts:
                batch.record(cid, agg.append(child, drafts, at=batch.now, actor=self.actor))
            return cid

    # -- curation ----------------------------------------------------------------------------

    def _simple(
        self, session_id: str, decide: Callable[[SessionState, Batch], list[ev.Event]]
    ) -> SessionState:
        with self.store.transaction() as batch:
            state = self._existing(batch, session_id)
            return batch.record(session_id, decide(state, batch))

    def set_title(self, session_id: str, title: str, *, kind: str = "user") -> SessionState:
        """Set (or with an empty title, clear) a session's title; titles are unique."""

        def decide(state: SessionState, batch: Batch) -> list[ev.Event]:
            events = agg.set_title(state, title, kind=kind, at=batch.now, actor=self.actor)
            for e in events:
                if isinstance(e, ev.TitleSet) and e.title:
                    self._check_title_free(batch, e.title, session_id)
            return events

        return self._simple(session_id, decide)

    def end_session(self, session_id: str, reason: str = "user_exit") -> SessionState:
        """Close a session (non-destructive; the next message reopens it)."""
        return self._simple(session_id, lambda s, b: agg.end(s, reason, at=b.now, actor=self.actor))

    def reopen(self, session_id: str) -> SessionState:
        """Reopen an ended session."""
        return self._simple(session_id, lambda s, b: agg.reopen(s, at=b.now, actor=self.actor))

    def resume(self, session_id: str, config: Mapping[str, Any] | None = None) -> SessionState:
        """Record a resume (reviving ended or sweep-archived sessions) and the config picked up."""
        return self._simple(
            session_id, lambda s, b: agg.resume(s, dict(config or {}), at=b.now, actor=self.actor)
        )

    def archive(self, session_id: str, reason: str = "user") -> SessionState:
        """Archive a session (``user`` or ``sweep``)."""
        return self._simple(
            session_id, lambda s, b: agg.archive(s, reason, at=b.now, actor=self.actor)
        )

    def unarchive(self, session_id: str, reason: str = "user") -> SessionState:
        """Unarchive a session."""
        return self._simple(
            session_id, lambda s, b: agg.unarchive(s, reason=reason, at=b.now, actor=self.actor)
        )

    def pin(self, session_id: str, pinned: bool = True) -> SessionState:
        """Pin (exempt from pruning) or unpin a session."""
        return self._simple(session_id, lambda s, b: agg.pin(s, pinned, at=b.now, actor=self.actor))

    def hide(self, session_id: str, hidden: bool = True) -> SessionState:
        """Hide a session from pickers, or show it again."""
        return self._simple(
            session_id, lambda s, b: agg.hide(s, hidden, at=b.now, actor=self.actor)
        )

    def change_workspace(self, session_id: str, cwd: str) -> SessionState:
        """Record a new working directory (and workspace key)."""
        return self._simple(
            session_id,
            lambda s, b: agg.change_workspace(
                s, cwd, workspace_key(cwd), at=b.now, actor=self.actor
            ),
        )

    def set_reasoning(self, session_id: str, level: str) -> SessionState:
        """Record a ``/reasoning`` level."""
        return self._simple(
            session_id, lambda s, b: agg.set_reasoning(s, level, at=b.now, actor=self.actor)
        )

    # -- prompts -----------------------------------------------------------------------------

    def request_prompt_refresh(self, session_ids: Iterable[str]) -> int:
        """Record a refresh request on each session holding a stored prompt; returns how many."""
        count = 0
        with self.store.transaction() as batch:
            for sid in session_ids:
                state = self._existing(batch, sid)
                if state.prompt_hash:
                    count += 1
                    batch.record(sid, agg.request_refresh(state, at=batch.now, actor=self.actor))
        return count

    def store_system_prompt(
        self, session_id: str, text: str, *, reason: str, tools: Sequence[str] | None = None
    ) -> str:
        """Store ``text`` as the session's prompt (content-addressed); returns its hash."""
        with self.store.transaction() as batch:
            state = self._existing(batch, session_id)
            sha = self._store_prompt(batch, text)
            events = agg.rebuild_prompt(state, sha, reason=reason, at=batch.now, actor=self.actor)
            if tools is not None:
                events += agg.pin_tools(state, tools, at=batch.now, actor=self.actor)
            batch.record(session_id, events)
            return sha

    def clear_stored_prompt(self, session_id: str, reason: str = "repair") -> SessionState:
        """Drop the stored prompt so the next turn rebuilds it."""
        return self._simple(
            session_id, lambda s, b: agg.clear_prompt(s, reason=reason, at=b.now, actor=self.actor)
        )

    def pin_tools(self, session_id: str, tools: Sequence[str]) -> SessionState:
        """Re-pin the session's tool surface."""
        return self._simple(
            session_id, lambda s, b: agg.pin_tools(s, tools, at=b.now, actor=self.actor)
        )

    def stored_prompt(self, session_id: str) -> str | None:
        """The exact stored prompt text of a session, or None."""
        state = self.get(session_id)
        return (
            lookup.prompt_text(self.store.connection(), state.prompt_hash)
            if state.prompt_hash
            else None
        )

    # -- search ------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        limit: int = 20,
        sources: Sequence[str] | None = None,
        roles: Sequence[str] | None = None,
    ) -> list[SearchHit]:
        """Full-text search over stored messages (bm25 + snippets), best first.

        The default scope is the one ``hermes sessions list`` and ``hermes sessions search``
        use: automation sources (``DEFAULT_HIDDEN_SOURCES``: cron, kanban, tool) are left out
        unless ``sources`` names them.
        """
        check_text(query, "search query")
        return search_messages(
            self.store.connection(),
            query,
            limit=limit,
            sources=sources,
            roles=roles,
            exclude_sources=() if sources else DEFAULT_HIDDEN_SOURCES,
        )
