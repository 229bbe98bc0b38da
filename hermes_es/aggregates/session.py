"""Session commands: given the current state and a request, decide the events (or refuse).

Every function here is pure: no I/O, no clock (``at`` is passed in). The commands layer loads
the state, calls one of these inside a write transaction, and stores what it returns.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from typing import Any

import msgspec

from hermes_es import events as ev
from hermes_es.aggregates.state import SessionState
from hermes_es.aggregates.validation import (
    DEFAULT_MAX_MESSAGE_BYTES,
    check_message_size,
    check_parent_kind,
    check_role,
    check_session_id,
    check_source,
    check_text,
    check_title,
    content_text,
    message_bytes,
)
from hermes_es.errors import InvariantError, ValidationError

REASONING_LEVELS = ("none", "minimal", "low", "medium", "high", "xhigh")


UID_LENGTH = 16
"""Characters of a uid hermes generates: 80 random bits in lowercase base32. A uid only has
to be unique within its session; clients may supply uids of any other valid form."""


_UID_ALPHABET = b"abcdefghijklmnopqrstuvwxyz234567"
_UID_TABLE = bytes(_UID_ALPHABET[b % 32] for b in range(256))
"""Each random byte gives one character from its low 5 bits (256 is a multiple of 32, so
every character is equally likely): 16 characters carry 80 random bits."""
_UID_POOL: list[str] = []
"""Uids drawn ahead: one ``token_bytes`` and one ``bytes.translate`` for 64 of them (Python's
base32 encoder is written in Python, and a pass per uid cost more than the rest of deciding an
append). Each uid is still 80 fresh random bits of its own; a forked child starts with an
empty pool."""
os.register_at_fork(after_in_child=_UID_POOL.clear)


def new_uid() -> str:
    """A fresh message uid (when the client supplied none): 16 lowercase base32 characters."""
    try:
        return _UID_POOL.pop()
    except IndexError:
        text = secrets.token_bytes(UID_LENGTH * 64).translate(_UID_TABLE).decode()
        _UID_POOL.extend(text[i : i + UID_LENGTH] for i in range(0, len(text), UID_LENGTH))
        return _UID_POOL.pop()


def start(
    session_id: str,
    *,
    at: float,
    source: str,
    title: str = "",
    parent_id: str = "",
    parent_kind: str = "",
    actor: str = "",
    **fields: Any,
) -> list[ev.Event]:
    """Decide the events that create a session."""
    check_session_id(session_id)
    check_source(source)
    if parent_id and not parent_kind:
        raise ValidationError("a parent session needs a parent kind", subject=parent_id)
    if parent_kind:
        check_parent_kind(parent_kind)
        if not parent_id:
            raise ValidationError(f"parent kind {parent_kind!r} needs a parent id")
    if parent_id == session_id:
        raise ValidationError("a session cannot be its own parent", subject=session_id)
    return [
        ev.SessionStarted(
            at=at,
            actor=actor,
            session_id=session_id,
            source=source,
            title=check_title(title) if title else "",
            parent_id=parent_id,
            parent_kind=parent_kind,
            **fields,
        )
    ]


def _require_live(state: SessionState) -> None:
    if state.version == 0:
        raise InvariantError(f"session {state.session_id} does not exist", subject=state.session_id)


def _revive(state: SessionState, at: float, actor: str) -> list[ev.Event]:
    """Events that make an ended or sweep-archived session live again before new activity."""
    out: list[ev.Event] = []
    if state.ended:
        out.append(ev.SessionReopened(at=at, actor=actor))
    if state.archived == "sweep":
        out.append(ev.SessionUnarchived(at=at, actor=actor, reason="resumed"))
    return out


def prepare_messages(
    state: SessionState,
    drafts: Sequence[ev.Message],
    *,
    at: float,
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> list[ev.Message]:
    """Validate drafts (valid Unicode, at most ``max_bytes`` each, 0 = no limit) and give them
    sequence numbers, uids and times."""
    if not drafts:
        raise ValidationError("a turn needs at least one message", subject=state.session_id)
    open_calls = set(state.open_tool_calls)
    seen_uids: set[str] = set()
    out: list[ev.Message] = []
    seq = state.next_seq
    for i, draft in enumerate(drafts):
        where = f"message {i + 1} of the turn"
        check_text(draft, f"{where}: message")
        calls = "".join(c.name + c.arguments for c in draft.tool_calls)
        check_message_size(message_bytes(draft.content, draft.reasoning, calls), max_bytes, where)
        check_role(draft.role)
        if draft.tokens_in < 0 or draft.tokens_out < 0:
            raise ValidationError(
                f"{where}: token counts cannot be negative "
                f"(tokens_in {draft.tokens_in}, tokens_out {draft.tokens_out})",
                subject=draft.role,
            )
        text = content_text(draft.content)
        if draft.role in ("user", "system") and not text.strip() and not draft.media:
            raise ValidationError(f"{where}: empty {draft.role} message", subject=draft.role)
        if (
            draft.role == "assistant"
            and not text.strip()
            and not draft.tool_calls
            and not draft.reasoning
        ):
            raise ValidationError(
                f"{where}: empty assistant message with no tool calls", subject=draft.role
            )
        if draft.role == "tool":
            if not draft.tool_call_id:
                raise ValidationError(f"{where}: a tool result needs a tool_call_id")
            if draft.tool_call_id not in open_calls:
                raise InvariantError(
                    f"{where}: tool result answers {draft.tool_call_id!r}, which no earlier "
                    "tool call in this session is waiting for",
                    subject=draft.tool_call_id,
                )
            open_calls.discard(draft.tool_call_id)
        elif draft.tool_call_id:
            raise ValidationError(f"{where}: only tool results carry a tool_call_id")
        if draft.tool_calls and draft.role != "assistant":
            raise ValidationError(f"{where}: only assistant messages carry tool calls")
        for call in draft.tool_calls:
            if not call.id or not call.name:
                raise ValidationError(f"{where}: a tool call needs an id and a name")
            open_calls.add(call.id)
        uid = draft.uid or new_uid()
        if uid in seen_uids:
            raise ValidationError(f"{where}: uid {uid!r} appears twice in one turn", subject=uid)
        seen_uids.add(uid)
        out.append(msgspec.structs.replace(draft, seq=seq, uid=uid, at=draft.at or at))
        seq += 1
    return out


def append(
    state: SessionState,
    drafts: Sequence[ev.Message],
    *,
    at: float,
    actor: str = "",
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> list[ev.Event]:
    """Decide the events for appending one message or one whole turn atomically (each message
    at most ``max_bytes``; 0 = no limit)."""
    _require_live(state)
    messages = prepare_messages(state, drafts, at=at, max_bytes=max_bytes)
    body: ev.Event
    if len(messages) == 1:
        body = ev.MessageAppended(at=at, actor=actor, message=messages[0])
    else:
        body = ev.TurnAppended(at=at, actor=actor, messages=messages)
    return [*_revive(state, at, actor), body]


def rewind(state: SessionState, seq: int, *, at: float, actor: str = "") -> list[ev.Event]:
    """Decide a rewind: every active message after ``seq`` leaves the conversation.

    ``seq`` -1 rewinds to before the first message (the whole active conversation leaves).
    """
    _require_live(state)
    if seq != -1 and not state.is_active(seq):
        raise InvariantError(
            f"cannot rewind to message {seq}: it is not an active message of {state.session_id}",
            subject=str(seq),
        )
    removed = [s for s in state.active_seqs() if s > seq]
    if not removed:
        return []
    return [ev.RewoundTo(at=at, actor=actor, seq=seq, removed=removed)]


def rewind_turns(state: SessionState, user_seqs: Sequence[int], turns: int) -> int | None:
    """The seq to rewind to so that the last ``turns`` user turns are removed, or None."""
    if turns < 1:
        raise ValidationError(f"rewind needs a positive number of turns, got {turns}")
    if len(user_seqs) < turns:
        return None
    first_removed = user_seqs[-turns]
    earlier = [s for s in state.active_seqs() if s < first_removed]
    return earlier[-1] if earlier else -1


def edit(
    state: SessionState,
    target_seq: int,
    draft: ev.Message,
    *,
    at: float,
    actor: str = "",
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> list[ev.Event]:
    """Decide an edit: the target becomes inactive and the replacement takes its place."""
    _require_live(state)
    if not state.is_active(target_seq):
        raise InvariantError(
            f"cannot edit message {target_seq}: it is not an active message",
            subject=str(target_seq),
        )
    if draft.role == "tool":
        raise ValidationError("tool results cannot be edited")
    probe = msgspec.structs.replace(state, open_tool_calls=[])
    [message] = prepare_messages(probe, [draft], at=at, max_bytes=max_bytes)
    return [ev.MessageEdited(at=at, actor=actor, target_seq=target_seq, message=message)]


def compact(
    state: SessionState,
    archived: Sequence[int],
    summary: Sequence[ev.Message],
    *,
    at: float,
    actor: str = "",
) -> list[ev.Event]:
    """Decide an in-place compaction: ``archived`` leave the context, ``summary`` replaces them."""
    _require_live(state)
    if not archived:
        raise InvariantError(
            "nothing to compact: no older active messages", subject=state.session_id
        )
    for seq in archived:
        if not state.is_active(seq):
            raise InvariantError(f"cannot compact message {seq}: it is not active")
    probe = msgspec.structs.replace(state, open_tool_calls=[])
    messages = prepare_messages(probe, summary, at=at) if summary else []
    return [ev.CompactedInPlace(at=at, actor=actor, archived=list(archived), summary=messages)]


def set_title(
    state: SessionState, title: str, *, kind: str, at: float, actor: str = ""
) -> list[ev.Event]:
    """Decide a title change (the caller checks uniqueness across sessions)."""
    _require_live(state)
    cleaned = check_title(title) if title else ""
    if cleaned == state.title and (kind == state.title_kind or not cleaned):
        return []
    return [ev.TitleSet(at=at, actor=actor, title=cleaned, kind=kind)]


def end(state: SessionState, reason: str, *, at: float, actor: str = "") -> list[ev.Event]:
    """Decide closing the session (a no-op when already ended)."""
    _require_live(state)
    if not reason:
        raise ValidationError("an end needs a reason")
    return [] if state.ended else [ev.SessionEnded(at=at, actor=actor, reason=reason)]


def reopen(state: SessionState, *, at: float, actor: str = "") -> list[ev.Event]:
    """Decide reopening an ended session."""
    _require_live(state)
    return _revive(state, at, actor) if state.ended else []


def resume(
    state: SessionState, config: dict[str, Any], *, at: float, actor: str = ""
) -> list[ev.Event]:
    """Decide a resume: revive if needed and record the config picked up."""
    _require_live(state)
    return [*_revive(state, at, actor), ev.SessionResumed(at=at, actor=actor, config=config)]


def archive(state: SessionState, reason: str, *, at: float, actor: str = "") -> list[ev.Event]:
    """Decide archiving (user or idle sweep); a sweep never re-labels a user archive."""
    _require_live(state)
    if reason not in ("user", "sweep"):
        raise ValidationError(f"invalid archive reason {reason!r}")
    if state.archived == reason or (state.archived == "user" and reason == "sweep"):
        return []
    return [ev.SessionArchived(at=at, actor=actor, reason=reason)]


def unarchive(
    state: SessionState, *, reason: str = "user", at: float, actor: str = ""
) -> list[ev.Event]:
    """Decide unarchiving."""
    _require_live(state)
    return [ev.SessionUnarchived(at=at, actor=actor, reason=reason)] if state.archived else []


def pin(state: SessionState, pinned: bool, *, at: float, actor: str = "") -> list[ev.Event]:
    """Decide pinning or unpinning."""
    _require_live(state)
    if state.pinned == pinned:
        return []
    return [
        ev.SessionPinned(at=at, actor=actor) if pinned else ev.SessionUnpinned(at=at, actor=actor)
    ]


def hide(state: SessionState, hidden: bool, *, at: float, actor: str = "") -> list[ev.Event]:
    """Decide hiding or showing the session in pickers."""
    _require_live(state)
    return [] if state.hidden == hidden else [ev.SessionHidden(at=at, actor=actor, hidden=hidden)]


def change_workspace(
    state: SessionState, cwd: str, workspace_key: str, *, at: float, actor: str = ""
) -> list[ev.Event]:
    """Decide a workspace change."""
    _require_live(state)
    if cwd == state.cwd and workspace_key == state.workspace_key:
        return []
    return [ev.WorkspaceChanged(at=at, actor=actor, cwd=cwd, workspace_key=workspace_key)]


def set_reasoning(state: SessionState, level: str, *, at: float, actor: str = "") -> list[ev.Event]:
    """Decide a ``/reasoning`` change."""
    _require_live(state)
    if level not in REASONING_LEVELS:
        raise ValidationError(
            f"invalid reasoning level {level!r}: expected one of {', '.join(REASONING_LEVELS)}"
        )
    return (
        [] if level == state.reasoning else [ev.ReasoningChanged(at=at, actor=actor, level=level)]
    )


def continue_into(
    state: SessionState, child_id: str, *, at: float, actor: str = ""
) -> list[ev.Event]:
    """Decide splitting the session into a compression continuation ``child_id``."""
    _require_live(state)
    if state.continued_into:
        raise InvariantError(
            f"session {state.session_id} already continues in {state.continued_into}",
            subject=state.session_id,
        )
    out: list[ev.Event] = [ev.SessionContinued(at=at, actor=actor, child_id=child_id)]
    if not state.ended:
        out.append(ev.SessionEnded(at=at, actor=actor, reason="compression"))
    return out


def request_refresh(state: SessionState, *, at: float, actor: str = "") -> list[ev.Event]:
    """Decide a prompt refresh request (only sessions holding a stored prompt need one)."""
    _require_live(state)
    if not state.prompt_hash or state.refresh_pending:
        return []
    return [ev.PromptRefreshRequested(at=at, actor=actor)]


def rebuild_prompt(
    state: SessionState, prompt_hash: str, *, reason: str, at: float, actor: str = ""
) -> list[ev.Event]:
    """Decide storing a rebuilt system prompt."""
    _require_live(state)
    if prompt_hash == state.prompt_hash and not state.refresh_pending:
        return []
    return [ev.SystemPromptRebuilt(at=at, actor=actor, prompt_hash=prompt_hash, reason=reason)]


def clear_prompt(state: SessionState, *, reason: str, at: float, actor: str = "") -> list[ev.Event]:
    """Decide clearing the stored prompt so the next turn rebuilds it."""
    _require_live(state)
    if not state.prompt_hash:
        return []
    return [ev.StoredPromptCleared(at=at, actor=actor, reason=reason)]


def pin_tools(
    state: SessionState, tools: Sequence[str], *, at: float, actor: str = ""
) -> list[ev.Event]:
    """Decide re-pinning the tool surface."""
    _require_live(state)
    wanted = list(tools)
    return [] if state.tools == wanted else [ev.ToolsPinned(at=at, actor=actor, tools=wanted)]


def import_history(
    state: SessionState,
    messages: Sequence[ev.Message],
    states: Sequence[str],
    *,
    origin: str,
    at: float,
    actor: str = "",
    chunk: int = 2000,
    live: bool = False,
) -> list[ev.Event]:
    """Decide restoring rows as archived history (or, ``live``, as the session's continuing
    conversation), in chunks of at most ``chunk`` messages."""
    _require_live(state)
    if len(messages) != len(states):
        raise ValidationError("every imported message needs a state")
    out: list[ev.Event] = []
    seq = state.next_seq
    renumbered = []
    for m in messages:
        check_role(m.role)
        renumbered.append(msgspec.structs.replace(m, seq=seq))
        seq += 1
    for i in range(0, len(renumbered), chunk):
        out.append(
            ev.HistoryImported(
                at=at,
                actor=actor,
                messages=renumbered[i : i + chunk],
                states=list(states[i : i + chunk]),
                origin=origin,
                live=live,
            )
        )
    return out
