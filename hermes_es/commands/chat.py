"""The chat turn use case: prompt, context window, responder call and atomic recording.

A turn sends exactly three things: the session's stored system prompt bytes, its active
conversation window, and the per-turn injections. The user's message is recorded before the
responder is called (so a failing endpoint never loses it); everything the responder returns
(tool calls, tool results, reply) is then recorded as one atomic turn.

Concurrency: every append names the stream version this chat last saw. When another writer got
there first the chat reloads its window and retries, so nothing is lost. A chat built with a
``guard`` calls it before every write: the CLI's guard raises ``SessionTakenOverError`` once
another process has taken the session over, so a taken-over chat writes nothing more (a reply
that arrives after the take-over is handed back on the error, never recorded). When the session was
deleted under an open chat, the next save recreates it under the same id with the whole
in-memory transcript.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from hermes_es.commands.openai_messages import send_order, unanswered_calls, with_media_text
from hermes_es.errors import (
    ConflictError,
    InvariantError,
    SessionNotFoundError,
    ValidationError,
)

if TYPE_CHECKING:
    # Imported lazily at run time: the responders package pulls in the HTTP client and the
    # engine pulls in eventsourcing, neither of which a resume needs before its first prompt.
    import apsw

    from hermes_es.aggregates.state import SessionState
    from hermes_es.commands.engine import SessionEngine
    from hermes_es.commands.turn_events import TurnEvent
    from hermes_es.config import HermesConfig
    from hermes_es.queries.transcript import TranscriptMessage
    from hermes_es.responders.base import ChatMessage, Responder, TurnResult
    from hermes_es.tools import ToolContext

CLI_HISTORY_SOURCES = ("cli", "tui", "oneshot")
"""Sources ``-c`` and ``--resume latest`` treat as CLI history (one-shot runs included)."""

PICKER_HIDDEN_SOURCES = ("oneshot", "kanban", "tool")
"""Sources hidden from session pickers such as ``/sessions``."""

SUMMARY_PREFIX = "[Summary of earlier conversation]"

REPAIR_RESULT = "error: interrupted: this tool call never returned a result (recorded on repair)"
"""The tool result a repair records for a call an earlier run left unanswered."""

Notify = Callable[[str], None]


def _quiet(_: str) -> None:
    """Default notifier: say nothing."""


def _ignore(_: TurnEvent) -> None:
    """Default turn-event listener: draw nothing."""


class TurnOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What one turn produced."""

    session_id: str
    reply: str
    """The final assistant text."""
    messages: list[ChatMessage]
    """Everything the responder returned, in order."""
    seqs: list[int]
    """Sequence numbers of the user message then the responder's messages."""
    attachments: list[str] = []
    """One note per attachment handled this turn."""
    interrupted: bool = False
    """The turn was cancelled part-way; what arrived was recorded, marked interrupted."""


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """What the responder's side of a turn produced (``Chat.respond``), not yet stored."""

    reply: str
    messages: list[ChatMessage]
    dicts: list[dict[str, Any]]
    """``messages`` as appendable mappings (the turn's usage on the last)."""
    interrupted: bool = False


class TurnPlan(msgspec.Struct, frozen=True, kw_only=True):
    """A turn ``Chat.plan_turn`` found ready: its exact system prompt and user message."""

    prompt: str
    user: dict[str, Any]


class CompressOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What ``/compress`` did."""

    mode: str
    """in_place | split."""
    session_id: str
    """The session the chat continues in (the child after a split)."""
    archived: int
    """Messages that left the active context."""
    kept: int
    """Messages kept verbatim."""


# --- conversions -----------------------------------------------------------------------------


def stored_to_dict(message: TranscriptMessage) -> dict[str, Any]:
    """A stored transcript message as an appendable message mapping."""
    return {
        "role": message.role,
        "content": message.parts if message.parts is not None else message.content,
        "tool_calls": [
            {
                "id": c.get("id", ""),
                "name": c.get("name", ""),
                "arguments": c.get("arguments", "{}"),
                **({"type": c["type"]} if c.get("type", "function") != "function" else {}),
            }
            for c in message.tool_calls
        ],
        "tool_call_id": message.tool_call_id,
        "tool_name": message.tool_name,
        "reasoning": message.reasoning,
        "media": message.media,
        "finish_reason": message.finish_reason,
    }


def context_window(conn: apsw.Connection, session_id: str) -> list[dict[str, Any]]:
    """The session's context window as appendable message mappings."""
    from hermes_es.queries.transcript import messages_of

    return [stored_to_dict(m) for m in messages_of(conn, session_id, scope="context")]


def dict_to_chat(message: dict[str, Any]) -> ChatMessage:
    """An appendable message mapping as the responder sees it (media text rendered in)."""
    from hermes_es.responders.base import ChatMessage, ToolCall

    content = with_media_text(message.get("content", ""), message.get("media") or [])
    return ChatMessage(
        role=message["role"],
        content=content,
        tool_calls=[
            ToolCall(
                id=c["id"],
                name=c["name"],
                arguments=c.get("arguments", "{}"),
                type=c.get("type", "function"),
            )
            for c in message.get("tool_calls") or []
        ],
        tool_call_id=message.get("tool_call_id"),
        name=message.get("tool_name"),
    )


def _produced_dicts(
    messages: Sequence[ChatMessage], usage: tuple[int, int]
) -> list[dict[str, Any]]:
    """The turn's messages as appendable mappings (the turn's usage on its final message)."""
    out: list[dict[str, Any]] = []
    for index, m in enumerate(messages):
        last = index == len(messages) - 1
        out.append(
            {
                "role": m.role,
                "content": m.content,
                "tool_calls": [
                    {
                        "id": c.id,
                        "name": c.name,
                        "arguments": c.arguments,
                        **({"type": c.type} if c.type != "function" else {}),
                    }
                    for c in m.tool_calls
                ],
                "tool_call_id": m.tool_call_id,
                "tool_name": m.name,
                "reasoning": m.reasoning,
                "finish_reason": m.finish_reason,
                "tokens_in": usage[0] if last else 0,
                "tokens_out": usage[1] if last else 0,
            }
        )
    return out


def result_to_dicts(result: TurnResult) -> list[dict[str, Any]]:
    """A responder's messages as appendable mappings (usage on the final message)."""
    return _produced_dicts(
        result.messages, (result.usage.prompt_tokens, result.usage.completion_tokens)
    )


def paired(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop tool results whose call is not in ``messages`` (a window may start mid-turn)."""
    open_calls: set[str] = set()
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            if m.get("tool_call_id") not in open_calls:
                continue
            open_calls.discard(m["tool_call_id"])
        for call in m.get("tool_calls") or []:
            open_calls.add(call["id"])
        out.append(m)
    return out


def block_interrupts() -> None:
    """Keep SIGINT off the calling worker thread (POSIX): the kernel then delivers Ctrl-C to
    the main thread, whose blocking ``input()`` it must interrupt (a signal taken by a worker
    thread would only be noticed after the user pressed Enter)."""
    import signal

    if threading.current_thread() is not threading.main_thread() and hasattr(
        signal, "pthread_sigmask"
    ):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def is_deleted_error(exc: Exception) -> bool:
    """True when an append failed because the session no longer exists."""
    if isinstance(exc, SessionNotFoundError):
        return True
    return isinstance(exc, InvariantError) and (
        "deleted" in exc.message or "does not exist" in exc.message
    )


def _call_ids(messages: Sequence[dict[str, Any]]) -> set[str]:
    """Every tool call id ``messages`` make or answer."""
    ids: set[str] = set()
    for m in messages:
        for call in m.get("tool_calls") or ():
            ids.add(call["id"])
        if m["role"] == "tool" and m.get("tool_call_id") is not None:
            ids.add(m["tool_call_id"])
    return ids


class _Window:
    """What ``Chat`` keeps of its in-memory transcript between turns: ``ordered`` is the send
    order of ``memory[:covered]`` (as the responder sees it), whose messages make or answer
    the tool calls ``calls``; ``open`` are the calls no message answers.

    Messages added after ``covered`` that touch none of ``calls`` order the same alone as
    after it (``send_order`` moves a result only up to its own call, and places a call's
    first result only), so their order is appended to ``ordered``."""

    __slots__ = ("answered", "calls", "covered", "memory", "open", "ordered")

    def __init__(self, memory: list[dict[str, Any]]) -> None:
        self.memory = memory
        self.covered = 0
        self.ordered: list[ChatMessage] = []
        self.calls: set[str] = set()
        self.answered: set[str] = set()
        self.open: set[str] = set()

    def add(self, messages: Sequence[dict[str, Any]]) -> None:
        """Count ``messages`` (the next ones of ``memory``) in: calls, answers, what is open."""
        for m in messages:
            if m["role"] == "tool" and m.get("tool_call_id") is not None:
                self.answered.add(m["tool_call_id"])
                self.open.discard(m["tool_call_id"])
                self.calls.add(m["tool_call_id"])
            for call in m.get("tool_calls") or ():
                self.calls.add(call["id"])
                if m["role"] == "assistant" and call["id"] not in self.answered:
                    self.open.add(call["id"])
        self.covered += len(messages)


# --- the chat --------------------------------------------------------------------------------


class Chat:
    """One live chat on one session: turns, compaction, rewind, and recovery."""

    def __init__(
        self,
        engine: SessionEngine,
        session_id: str,
        *,
        responder: Responder,
        config: HermesConfig,
        profile_dir: Path,
        tools: Sequence[str],
        model: str = "",
        reasoning: str | None = None,
        workspace: Path | None = None,
        notify: Notify = _quiet,
        guard: Callable[[], None] | None = None,
    ) -> None:
        self.engine = engine
        self.guard = guard
        """Called before every write; raises to stop this chat writing (a take-over)."""
        self.session_id = session_id
        self.responder = responder
        self.config = config
        self.profile_dir = profile_dir
        self.tools = list(tools)
        self.workspace = workspace
        self.notify = notify
        self.pending_attachments: list[Path] = []
        state = engine.get(session_id)
        self.model = model or state.model or config.model.name
        # /reasoning level, else the profile's default effort, sent from the first turn on
        self.reasoning = (
            reasoning if reasoning is not None else state.reasoning or config.model.reasoning_effort
        )
        self._meta = state
        self._prompt_text: str | None = None
        self._sha_of: tuple[str | None, str] = (None, "")
        self._as_chat: dict[int, tuple[dict[str, Any], ChatMessage]] = {}
        """``window``'s conversions: id of a mapping in memory → (that mapping, its message)."""
        self._window: _Window | None = None
        """The last window, and how much of which in-memory transcript it covers."""
        self._definitions: tuple[tuple[str, ...], list[dict[str, Any]]] | None = None
        """The last ``tool_definitions``: for which pinned tools, and the array."""
        self._context: tuple[tuple[str, Path | None], ToolContext] | None = None
        """The last ``tool_context``: for which cwd and workspace, and the context."""
        self.version = state.version
        self._memory: list[dict[str, Any]] | None = None
        self._preload: threading.Thread | None = None
        self._preloaded: list[dict[str, Any]] = []

    # -- state -------------------------------------------------------------------------------

    def start_preload(self) -> None:
        """Read the context window on a background thread (its own read connection) while the
        user types, so a long session reaches the input prompt without waiting for it."""
        if self._memory is not None or self._preload is not None:
            return
        db_path, sid = self.engine.db_path, self.session_id

        def load() -> None:
            from hermes_es.projections.catalog import connect

            block_interrupts()
            conn = connect(db_path)
            try:
                self._preloaded = context_window(conn, sid)
            finally:
                conn.close()

        self._preload = threading.Thread(target=load, name="hermes-preload", daemon=True)
        self._preload.start()

    def _join_preload(self) -> None:
        if self._preload is not None:
            self._preload.join()
            self._preload = None
            if self._memory is None:
                self._memory = self._preloaded

    @property
    def memory(self) -> list[dict[str, Any]]:
        """The in-memory transcript: the context window as this chat last saw it."""
        self._join_preload()
        if self._memory is None:
            self._memory = context_window(self.engine.store.connection(), self.session_id)
        return self._memory

    def reload(self) -> None:
        """Reload the in-memory window from the store (after another writer, rewind, compact)."""
        self._join_preload()
        self._memory = context_window(self.engine.store.connection(), self.session_id)
        self._as_chat.clear()
        self._window = None
        state = self.engine.get(self.session_id)
        self.version = state.version
        self._meta = state

    def window(self) -> list[ChatMessage]:
        """The active conversation window as the responder sees it (strict send order).

        Kept between turns (``_kept``). Each message is converted once: the chat keeps what
        it converted, by the identity of the in-memory mapping (kept with it, so an id is
        never reused while remembered); a reload starts afresh."""
        return list(self._kept().ordered)

    def _kept(self) -> _Window:
        """The window of the in-memory transcript as it is now. The transcript only grows
        between reloads, so what was added since the last look is ordered and appended to
        the last window, unless it answers or reuses a tool call of the older messages (a
        repair result, which moves up to its call): then the whole window is ordered
        again."""
        memory = self.memory
        kept = self._window
        if kept is not None and kept.memory is memory and kept.covered <= len(memory):
            if kept.covered == len(memory):
                return kept
            added = memory[kept.covered :]
            if _call_ids(added).isdisjoint(kept.calls):
                kept.ordered.extend(self._as_message(m) for m in send_order(added))
                kept.add(added)
                return kept
        kept = self._window = _Window(memory)
        kept.ordered.extend(self._as_message(m) for m in send_order(memory))
        kept.add(memory)
        return kept

    def _as_message(self, m: dict[str, Any]) -> ChatMessage:
        seen = self._as_chat
        known = seen.get(id(m))
        if known is None or known[0] is not m:
            known = seen[id(m)] = (m, dict_to_chat(m))
        return known[1]

    def _check_guard(self) -> None:
        """Stop here (the guard raises) when this chat may no longer write its session."""
        if self.guard is not None:
            self.guard()

    def _current_version(self) -> int:
        """The stream version now, recovering the session first if it was deleted (after the
        guard: every write asks for the version first, retries included)."""
        self._check_guard()
        try:
            state = self.engine.get(self.session_id)
        except (SessionNotFoundError, InvariantError) as exc:
            if not is_deleted_error(exc):
                raise
            self._recreate()
            state = self.engine.get(self.session_id)
        if state.version != self.version and self._transcript_unchanged(state):
            # Only events that leave the transcript alone came in (a gateway's turn admitted,
            # started, finished; a rename): the window is still right, no re-read.
            self.version = state.version
            self._meta = state
        elif state.version != self.version:
            self.notify(
                f"session {self.session_id} was changed by another writer; reloaded its window"
            )
            self.reload()
            state = self.engine.get(self.session_id)
        return state.version

    def _transcript_unchanged(self, state: SessionState) -> bool:
        """True when ``state`` moved past this chat's version without touching the transcript:
        the same session (not deleted and recreated) and no message change since then."""
        return (
            state.version > self.version
            and state.display_version <= self.version
            and state.started_at == self._meta.started_at
            and self._memory is not None
        )

    def _recreate(self) -> None:
        """Recreate a deleted session under the same id with the whole in-memory transcript."""
        meta = self._meta
        title = meta.title
        kwargs: dict[str, Any] = {
            "session_id": self.session_id,
            "user_id": meta.user_id,
            "profile": meta.profile,
            "model": meta.model,
            "model_config": {"reasoning_effort": meta.reasoning} if meta.reasoning else {},
            "system_prompt": self._prompt_text,
            "tools": meta.tools,
            "cwd": meta.cwd,
        }
        try:
            self.engine.start_session(meta.source, title=title, **kwargs)
        except ValidationError:
            self.engine.start_session(meta.source, **kwargs)
        memory = paired(self.memory)
        if memory:
            self.engine.append_turn(self.session_id, memory)
        self.notify(
            f"session {self.session_id} was deleted while open; recreated it with "
            f"{len(memory)} messages"
        )
        self.reload()

    def _append(self, messages: list[dict[str, Any]]) -> list[int]:
        """Append one atomic turn at the version this chat expects; retry after a conflict."""
        _ = self.memory  # load it before appending, so it never holds the new messages twice
        for _attempt in range(3):
            expected = self._current_version()
            try:
                seqs = self.engine.append_turn(self.session_id, messages, expected_version=expected)
            except ConflictError:
                continue
            except (SessionNotFoundError, InvariantError) as exc:
                if not is_deleted_error(exc):
                    raise
                self._recreate()
                continue
            self.memory.extend(messages)
            self.version = self.engine.get(self.session_id).version
            return seqs
        raise ConflictError(
            f"session {self.session_id} kept changing under this chat; try again",
            subject=self.session_id,
            expected=self.version,
            actual=self.engine.get(self.session_id).version,
        )

    # -- prompt ------------------------------------------------------------------------------

    def system_prompt(self) -> str:
        """The exact system prompt for this turn (built/stored first time, rebuilt on refresh)."""
        from hermes_es.commands.prompting import ensure_turn_prompt

        self._current_version()
        text = ensure_turn_prompt(
            self.engine,
            self.session_id,
            profile_dir=self.profile_dir,
            workspace=self.workspace,
            tools=self.tools,
        )
        self._prompt_text = text
        self.version = self.engine.get(self.session_id).version
        return text

    # -- media -------------------------------------------------------------------------------

    def attach(self, path: Path) -> None:
        """Queue a file for the next message (``/attach PATH``)."""
        resolved = path.expanduser()
        if not resolved.is_file():
            raise ValidationError(f"attachment not found: {path}", subject=str(path))
        self.pending_attachments.append(resolved)

    def _describe_image(self, path: Path) -> str:
        """Ask a vision-capable responder for a one-time description of an image."""
        import base64

        from hermes_es.responders.base import ChatMessage, text_of

        mime = "image/png" if path.suffix.lower() == ".png" else "image/jpeg"
        data = base64.b64encode(path.read_bytes()).decode()
        ask = ChatMessage(
            role="user",
            content=[
                {"type": "text", "text": "Describe this image in a few sentences for later turns."},
                {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}},
            ],
        )
        result = self.responder.respond("", [ask], model=self.model)
        return text_of(result.messages[-1].content).strip()

    def _media_for(self, text: str) -> tuple[list[dict[str, Any]], list[str]]:
        """Inspect each attachment once: media entries holding only the derived text."""
        from hermes_es.media import (
            describe_attachment,
            find_paths_in_message,
            render_attachment_text,
        )
        from hermes_es.transcribe import command_transcriber

        cwd = Path.cwd()
        paths = [*self.pending_attachments, *find_paths_in_message(text, cwd)]
        transcriber = (
            command_transcriber(
                self.config.media.transcribe_command, timeout=self.config.media.transcribe_timeout
            )
            if paths
            else None
        )
        self.pending_attachments = []
        seen: set[Path] = set()
        media: list[dict[str, Any]] = []
        notes: list[str] = []
        for path in paths:
            resolved = path.resolve()
            if resolved in seen:
                continue
            seen.add(resolved)
            att = describe_attachment(
                resolved,
                can_see_images=self.responder.can_see_images,
                describe_image=self._describe_image if self.responder.can_see_images else None,
                transcriber=transcriber,
            )
            media.append(
                {
                    "kind": att.kind,
                    "path": att.path,
                    "text": render_attachment_text(att),
                    "note": att.note,
                }
            )
            notes.append(f"{att.kind} {att.path}: {att.note}")
        return media, notes

    # -- turns -------------------------------------------------------------------------------

    def send(
        self,
        text: str,
        *,
        injections: Sequence[str] = (),
        on_event: Callable[[TurnEvent], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> TurnOutcome:
        """Run one turn: record the user message, then the tool loop, recorded atomically.

        The model is called with the window and the session's tools; each tool it calls is
        run from the registry and answered, and the model is called again, until it answers
        without tools or ``max_turns`` model calls were made. ``on_event`` hears each reply
        delta, tool call and tool result as they happen (see ``turn_events``); setting
        ``cancel`` stops the turn, keeping what arrived (marked ``interrupted``). Whatever
        happens, every recorded tool call is recorded with its result.
        """
        if not text.strip() and not self.pending_attachments:
            raise ValidationError("empty message", subject="message")
        from hermes_es.commands.holders import SessionTakenOverError

        emit = on_event or _ignore
        prompt = self.system_prompt()
        self._repair_unanswered()
        media, notes = self._media_for(text)
        user: dict[str, Any] = {"role": "user", "content": text, "media": media}
        [user_seq] = self._append([user])
        answer = self.respond(prompt, injections=injections, on_event=emit, cancel=cancel)
        try:
            seqs = self._append(answer.dicts) if answer.dicts else []
        except SessionTakenOverError as exc:
            exc.reply = answer.reply  # taken over while the responder ran: show it, record nothing
            raise
        return TurnOutcome(
            session_id=self.session_id,
            reply=answer.reply,
            messages=answer.messages,
            seqs=[user_seq, *seqs],
            attachments=notes,
            interrupted=answer.interrupted,
        )

    def respond(
        self,
        prompt: str,
        *,
        injections: Sequence[str] = (),
        on_event: Callable[[TurnEvent], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Answer:
        """The responder's side of a turn whose user message is already in the window: the
        tool loop, and what it produced as appendable mappings (not stored here)."""
        from hermes_es.responders.base import text_of

        base = self.window()
        if injections:
            base.append(self._injection(injections))
        produced, usage, interrupted = self._tool_loop(prompt, base, on_event or _ignore, cancel)
        reply = (
            text_of(produced[-1].content) if produced and produced[-1].role == "assistant" else ""
        )
        return Answer(
            reply=reply,
            messages=produced,
            dicts=_produced_dicts(produced, usage),
            interrupted=interrupted,
        )

    def plan_turn(self, text: str, state: SessionState) -> TurnPlan | None:
        """A turn that needs no write of its own before its user message, from the session's
        committed head ``state``: its prompt and user message, or None when ``send`` must run
        it (no window or prompt in memory yet, a prompt refresh or repair pending, an
        attachment or a file named in the text, an unanswered tool call, a transcript
        changed by another writer, an empty text). Reads nothing, writes nothing: a server
        stores the user message itself (``turn_steps.begin``), then calls ``recorded``,
        ``respond`` and ``recorded`` again."""
        from hermes_es.media import find_paths_in_message

        prompt = self._prompt_text
        if (
            not text.strip()
            or self.pending_attachments
            or self._memory is None
            or self._preload is not None
            or prompt is None
            or self.guard is not None
            or state.refresh_pending
            or state.prompt_hash != self._prompt_sha(prompt)
            or state.started_at != self._meta.started_at
        ):
            return None
        if state.version != self.version and not self._transcript_unchanged(state):
            return None
        if self._kept().open:  # an unanswered tool call: ``send`` repairs it first
            return None
        # a token names a file only with a slash, a leading ~ or a dot (media.py)
        if ("/" in text or "~" in text or "." in text) and find_paths_in_message(text, Path.cwd()):
            return None
        self.version = state.version
        self._meta = state
        return TurnPlan(prompt=prompt, user={"role": "user", "content": text, "media": []})

    def _prompt_sha(self, prompt: str) -> str:
        from hermes_es.commands.engine import prompt_sha

        if self._sha_of[0] != prompt:
            self._sha_of = (prompt, prompt_sha(prompt))
        return self._sha_of[1]

    def recorded(self, messages: Sequence[dict[str, Any]], version: int) -> None:
        """``messages`` were stored for this chat by someone else (a server's use case), the
        session now at ``version``: the window and version follow without a read."""
        self.memory.extend(messages)
        self.version = version

    @staticmethod
    def _injection(injections: Sequence[str]) -> ChatMessage:
        from hermes_es.responders.base import ChatMessage

        return ChatMessage(role="system", content="\n\n".join(injections))

    def tool_definitions(self) -> list[dict[str, Any]]:
        """The request's ``tools`` array: the session's pinned tools the registry can run."""
        from hermes_es.tools import definitions

        pinned = tuple(self._meta.tools if self._meta.tools is not None else self.tools)
        if self._definitions is None or self._definitions[0] != pinned:
            self._definitions = (pinned, definitions(pinned))  # (the registry is fixed)
        return list(self._definitions[1])

    def tool_context(self) -> ToolContext:
        """What this session's tools may see: its workspace and a store search."""
        from hermes_es.tools import ToolContext

        cwd = self._meta.cwd
        if self._context is None or self._context[0] != (cwd, self.workspace):
            workspace = Path(cwd) if cwd else self.workspace
            context = ToolContext(workspace=workspace, search=self._search_lines)
            self._context = ((cwd, self.workspace), context)
        return self._context[1]

    def _search_lines(self, query: str, limit: int) -> list[str]:
        hits = self.engine.search(query, limit=limit)
        return [
            f"{h.session_id} #{h.seq} {h.role}: "
            + h.snippet.replace("\x02", "").replace("\x03", "")
            for h in hits
        ]

    def _tool_loop(
        self,
        prompt: str,
        base: list[ChatMessage],
        emit: Callable[[TurnEvent], None],
        cancel: threading.Event | None,
    ) -> tuple[list[ChatMessage], tuple[int, int], bool]:
        """Call the model and run its tools until it answers; returns (messages, usage,
        interrupted)."""
        from hermes_es.commands.turn_events import ReplyDelta, ToolCallStarted, ToolResultReady
        from hermes_es.responders.base import ChatMessage, text_of
        from hermes_es.tools import run_tool

        tools = self.tool_definitions()
        context = self.tool_context()
        produced: list[ChatMessage] = []
        tokens_in = tokens_out = 0
        limit = self.config.max_turns
        for call_number in range(1, limit + 1):
            streamed: list[str] = []

            def on_delta(piece: str, streamed: list[str] = streamed) -> None:
                if piece:
                    streamed.append(piece)
                    emit(ReplyDelta(text=piece))

            result = self.responder.respond(
                prompt,
                [*base, *produced],
                model=self.model,
                reasoning=self.reasoning,
                tools=tools,
                on_delta=on_delta,
                cancel=cancel,
            )
            tokens_in += result.usage.prompt_tokens
            tokens_out += result.usage.completion_tokens
            interrupted = result.interrupted or (cancel is not None and cancel.is_set())
            messages = list(result.messages) or [ChatMessage(role="assistant")]
            answer = messages[-1]
            if not streamed and text_of(answer.content):
                emit(ReplyDelta(text=text_of(answer.content)))
            if interrupted:
                # keep what arrived; calls that never ran are not recorded
                kept = msgspec.structs.replace(answer, tool_calls=[], finish_reason="interrupted")
                if text_of(kept.content) or kept.reasoning:
                    produced.append(kept)
                return produced, (tokens_in, tokens_out), True
            produced.extend(messages[:-1])
            produced.append(answer)
            if not answer.tool_calls:
                return produced, (tokens_in, tokens_out), False
            last_call = call_number == limit
            for call in answer.tool_calls:
                emit(ToolCallStarted(call_id=call.id, name=call.name, arguments=call.arguments))
                if last_call:
                    content = f"error: not run: this turn reached max_turns ({limit} model calls)"
                    is_error = True
                elif cancel is not None and cancel.is_set():
                    content, is_error = "error: interrupted: the turn was cancelled", True
                else:
                    outcome = run_tool(call.name, call.arguments, context)
                    content, is_error = outcome.content, outcome.is_error
                emit(
                    ToolResultReady(
                        call_id=call.id, name=call.name, content=content, is_error=is_error
                    )
                )
                produced.append(
                    ChatMessage(role="tool", content=content, tool_call_id=call.id, name=call.name)
                )
            if cancel is not None and cancel.is_set():
                return produced, (tokens_in, tokens_out), True
        self.notify(f"the turn stopped after max_turns ({limit}) model calls")
        return produced, (tokens_in, tokens_out), False

    def _repair_unanswered(self) -> None:
        """Answer tool calls an older build left without results, as one recorded event, so
        a strict endpoint accepts the window."""
        missing = unanswered_calls(self.memory)
        if not missing:
            return
        repairs = [
            {
                "role": "tool",
                "content": REPAIR_RESULT,
                "tool_call_id": call_id,
                "tool_name": name or None,
                "finish_reason": "interrupted",
            }
            for call_id, name in missing
        ]
        self._append(repairs)
        self.notify(
            f"answered {len(repairs)} unanswered tool call(s) left by an earlier run as interrupted"
        )

    # -- slash-command use cases -------------------------------------------------------------

    def rewind(self, turns: int = 1) -> int:
        """Remove the last ``turns`` user turns; returns how many messages left the context."""
        self._check_guard()
        removed = self.engine.rewind_turns(self.session_id, turns)
        self.reload()
        return len(removed)

    def set_title(self, title: str) -> None:
        """Set the session title."""
        self._check_guard()
        self.engine.set_title(self.session_id, title)
        self._meta = self.engine.get(self.session_id)
        self.version = self._meta.version

    def set_reasoning(self, level: str) -> None:
        """Record a ``/reasoning`` level (kept across resumes)."""
        from typing import get_args

        from hermes_es.config import ReasoningEffort

        allowed = get_args(ReasoningEffort)
        if level not in allowed:
            raise ValidationError(
                f"reasoning level must be one of {', '.join(allowed)}, got {level!r}",
                subject=level,
            )
        self._check_guard()
        self.engine.set_reasoning(self.session_id, level)
        self.reasoning = level
        self.version = self.engine.get(self.session_id).version

    def compress(self, *, mode: str | None = None, keep_last: int | None = None) -> CompressOutcome:
        """Compact older turns into a summary, in place or by splitting into a child session."""
        from hermes_es.queries.transcript import messages_of

        mode = mode or self.config.sessions.compress_mode
        keep = self.config.sessions.compress_keep_last if keep_last is None else keep_last
        self._current_version()
        conn = self.engine.store.connection()
        window = messages_of(conn, self.session_id, scope="context")
        boundary = max(0, len(window) - keep)
        while 0 < boundary < len(window) and window[boundary].role != "user":
            boundary -= 1
        older, tail = window[:boundary], window[boundary:]
        if not older:
            raise InvariantError(
                f"nothing to compress: session {self.session_id} has only "
                f"{len(window)} active messages (keeping the last {keep})",
                subject=self.session_id,
            )
        summary = self.responder.summarize([dict_to_chat(stored_to_dict(m)) for m in older])
        summary_msg = {"role": "system", "content": f"{SUMMARY_PREFIX}\n{summary}"}
        if mode == "in_place":
            self.engine.compact(self.session_id, [m.seq for m in older], [summary_msg])
        else:
            carry = paired([stored_to_dict(m) for m in tail])
            self.session_id = self.engine.continue_session(
                self.session_id, [summary_msg], carry=carry
            )
        self.reload()
        return CompressOutcome(
            mode="in_place" if mode == "in_place" else "split",
            session_id=self.session_id,
            archived=len(older),
            kept=len(tail),
        )


# --- starting and branching ------------------------------------------------------------------


def fork_session(engine: SessionEngine, session_id: str, *, source: str = "cli") -> str:
    """Fork a branch of ``session_id``: a new session holding a copy of its context window."""
    state = engine.get(session_id)
    conn = engine.store.connection()
    window = paired(context_window(conn, session_id))
    child = engine.start_session(
        source,
        profile=state.profile,
        user_id=state.user_id,
        model=state.model,
        model_config={"reasoning_effort": state.reasoning} if state.reasoning else {},
        system_prompt=engine.stored_prompt(session_id),
        tools=state.tools,
        cwd=state.cwd or os.getcwd(),
        parent_id=session_id,
        parent_kind="branch",
    )
    if window:
        engine.append_turn(child, window)
    return child
