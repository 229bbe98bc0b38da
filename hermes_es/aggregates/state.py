"""The thin session state and the pure fold ``apply(state, event)``.

The state keeps only what invariants and lists need (status, counters, sequence numbers, active
ranges, flags, versions) and never message bodies, so it encodes to a few hundred bytes however
long the conversation is.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from hermes_es import events as ev
from hermes_es.aggregates.validation import content_text

PREVIEW_CHARS = 160


class SessionState(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Everything the session's invariants need, folded from its events."""

    session_id: str
    version: int = 0
    source: str = ""
    profile: str = "default"
    user_id: str = ""
    model: str = ""
    reasoning: str = ""
    title: str = ""
    title_kind: str = ""
    parent_id: str = ""
    parent_kind: str = ""
    cwd: str = ""
    workspace_key: str = ""
    started_at: float = 0.0
    last_active: float = 0.0
    ended: bool = False
    end_reason: str = ""
    archived: str = ""
    pinned: bool = False
    hidden: bool = False
    next_seq: int = 0
    active: list[list[int]] = []
    message_count: int = 0
    active_count: int = 0
    compacted_count: int = 0
    imported_count: int = 0
    open_tool_calls: list[str] = []
    open_call_seqs: list[int] = []
    """Per open tool call: the seq of the assistant message that made it (for rewinds)."""
    tokens_in: int = 0
    tokens_out: int = 0
    display_version: int = 0
    prompt_hash: str = ""
    prompt_version: int = 0
    refresh_pending: bool = False
    tools: list[str] | None = None
    continued_into: str = ""
    imported_from: str = ""
    preview: str = ""
    turns_admitted: int = 0
    """Turns admitted by a gateway so far (the last turn number)."""
    turn_queue: list[int] = []
    """Admitted turns waiting to start, first in first out."""
    turn_running: int = 0
    """The turn running now (0 when none)."""
    turn_epoch: int = 0
    """The gateway epoch that started the running turn."""
    turns_unknown: list[int] = []
    """Turns started by an earlier gateway epoch that never finished; followers wait."""
    recent_submissions: dict[str, int] = {}
    """The last client submission ids and the turns they were admitted as, oldest first
    (bounded; a dict: an admission looks its id up, it does not scan 256). Not part of the
    stored head (``encode_state``): the ``turn_submissions`` table keeps them."""

    @property
    def turn_state(self) -> str:
        """unknown | running | queued | '' (idle): what the session's turns are doing."""
        if self.turns_unknown:
            return "unknown"
        if self.turn_running:
            return "running"
        return "queued" if self.turn_queue else ""

    def is_active(self, seq: int) -> bool:
        """True when message ``seq`` is part of the live model context."""
        return any(lo <= seq < hi for lo, hi in self.active)

    def active_seqs(self) -> list[int]:
        """Every active sequence number, in sequence order."""
        return [s for lo, hi in self.active for s in range(lo, hi)]


def _add_active(state: SessionState, seq: int) -> None:
    ranges = state.active
    if ranges and ranges[-1][1] == seq:
        ranges[-1][1] = seq + 1
    else:
        ranges.append([seq, seq + 1])
    state.active_count += 1


def _remove_active(state: SessionState, seqs: Iterable[int]) -> None:
    drop = set(seqs)
    if not drop:
        return
    kept: list[list[int]] = []
    removed = 0
    for lo, hi in state.active:
        start = lo
        for s in range(lo, hi):
            if s in drop:
                removed += 1
                if start < s:
                    kept.append([start, s])
                start = s + 1
        if start < hi:
            kept.append([start, hi])
    state.active = kept
    state.active_count -= removed


def _track_tools(state: SessionState, message: ev.Message) -> None:
    if message.tool_calls:
        state.open_tool_calls = [*state.open_tool_calls, *(c.id for c in message.tool_calls)]
        state.open_call_seqs = [*state.open_call_seqs, *(message.seq for _ in message.tool_calls)]
    if message.role == "tool" and message.tool_call_id in state.open_tool_calls:
        kept = [
            (c, s)
            for c, s in zip(state.open_tool_calls, state.open_call_seqs, strict=False)
            if c != message.tool_call_id
        ]
        state.open_tool_calls = [c for c, _ in kept]
        state.open_call_seqs = [s for _, s in kept]


def _drop_calls_after(state: SessionState, seq: int) -> None:
    """Forget tool calls made by messages a rewind removed (calls at or before ``seq`` stay)."""
    kept = [
        (c, s)
        for c, s in zip(state.open_tool_calls, state.open_call_seqs, strict=False)
        if s <= seq
    ]
    state.open_tool_calls = [c for c, _ in kept]
    state.open_call_seqs = [s for _, s in kept]


def _preview(state: SessionState, message: ev.Message) -> None:
    if not state.preview and message.role == "user":
        state.preview = " ".join(content_text(message.content).split())[:PREVIEW_CHARS]


def _append(state: SessionState, message: ev.Message) -> None:
    _preview(state, message)
    state.next_seq = max(state.next_seq, message.seq + 1)
    state.message_count += 1
    state.tokens_in += message.tokens_in
    state.tokens_out += message.tokens_out
    _add_active(state, message.seq)
    _track_tools(state, message)


def apply(state: SessionState, event: ev.Event, version: int) -> SessionState:
    """Fold one event (at stream ``version``) into ``state``; returns the same object."""
    state.version = version
    if isinstance(event, ev.MessageAppended | ev.TurnAppended | ev.MessageEdited):
        state.last_active = event.at
        state.display_version = version
        if isinstance(event, ev.MessageAppended):
            _append(state, event.message)
        elif isinstance(event, ev.TurnAppended):
            for message in event.messages:
                _append(state, message)
        else:
            _remove_active(state, [event.target_seq])
            _append(state, event.message)
    elif isinstance(event, ev.SessionStarted):
        state.source = event.source
        state.profile = event.profile
        state.user_id = event.user_id
        state.model = event.model
        state.reasoning = str(event.model_config.get("reasoning_effort", ""))
        state.title = event.title
        state.title_kind = "user" if event.title else ""
        state.parent_id = event.parent_id
        state.parent_kind = event.parent_kind
        state.cwd = event.cwd
        state.workspace_key = event.workspace_key
        state.started_at = event.at
        state.last_active = event.at
        state.prompt_hash = event.prompt_hash
        state.prompt_version = version if event.prompt_hash else 0
        state.tools = list(event.tools) if event.tools is not None else None
        state.imported_from = event.imported_from
    elif isinstance(event, ev.RewoundTo):
        _remove_active(state, event.removed)
        _drop_calls_after(state, event.seq)
        state.display_version = version
        state.last_active = event.at
    elif isinstance(event, ev.CompactedInPlace):
        _remove_active(state, event.archived)
        state.compacted_count += len(event.archived)
        for message in event.summary:
            _append(state, message)
        state.display_version = version
        state.last_active = event.at
    elif isinstance(event, ev.HistoryImported):
        state.message_count += len(event.messages)
        if not event.live:
            state.imported_count += len(event.messages)
        for message, row_state in zip(event.messages, event.states, strict=False):
            _preview(state, message)
            if event.live and row_state == "active":
                _add_active(state, message.seq)
                _track_tools(state, message)
            elif event.live and row_state == "compacted":
                state.compacted_count += 1
        if event.messages:
            state.next_seq = max(state.next_seq, event.messages[-1].seq + 1)
            state.last_active = max(state.last_active, event.messages[-1].at)
        state.display_version = version
    elif isinstance(event, ev.TokenUsageRecorded):
        state.tokens_in += event.tokens_in
        state.tokens_out += event.tokens_out
    elif isinstance(event, ev.TitleSet):
        state.title = event.title
        state.title_kind = event.kind if event.title else ""
    elif isinstance(event, ev.SessionEnded):
        state.ended = True
        state.end_reason = event.reason
    elif isinstance(event, ev.SessionReopened):
        state.ended = False
        state.end_reason = ""
        state.last_active = event.at
    elif isinstance(event, ev.SessionContinued):
        state.continued_into = event.child_id
    elif isinstance(event, ev.SessionArchived):
        state.archived = event.reason
    elif isinstance(event, ev.SessionUnarchived):
        state.archived = ""
    elif isinstance(event, ev.SessionPinned):
        state.pinned = True
    elif isinstance(event, ev.SessionUnpinned):
        state.pinned = False
    elif isinstance(event, ev.SessionHidden):
        state.hidden = event.hidden
    elif isinstance(event, ev.WorkspaceChanged):
        state.cwd = event.cwd
        state.workspace_key = event.workspace_key
    elif isinstance(event, ev.ReasoningChanged):
        state.reasoning = event.level
    elif isinstance(event, ev.SessionResumed):
        state.last_active = event.at
    elif isinstance(event, ev.PromptRefreshRequested):
        state.refresh_pending = True
    elif isinstance(event, ev.SystemPromptRebuilt):
        state.prompt_hash = event.prompt_hash
        state.prompt_version = version
        state.refresh_pending = False
    elif isinstance(event, ev.StoredPromptCleared):
        state.prompt_hash = ""
        state.prompt_version = version
    elif isinstance(event, ev.ToolsPinned):
        state.tools = list(event.tools)
    elif isinstance(event, _TURN_EVENTS):
        _apply_turn(state, event)
    return state


RECENT_SUBMISSIONS = 256
"""How many submission ids a session remembers for idempotent admission."""

_TURN_EVENTS = (
    ev.TurnAdmitted,
    ev.TurnStarted,
    ev.TurnFinished,
    ev.TurnUnknown,
    ev.TurnResolved,
)


def _apply_turn(state: SessionState, event: ev.Event) -> None:
    """Fold a turn lifecycle event."""
    if isinstance(event, ev.TurnAdmitted):
        state.turns_admitted = max(state.turns_admitted, event.turn)
        state.turn_queue = [*state.turn_queue, event.turn]
        recent = dict(state.recent_submissions)  # (replaced, never changed in place)
        recent[event.submission_id] = event.turn
        if len(recent) > RECENT_SUBMISSIONS:
            del recent[next(iter(recent))]
        state.recent_submissions = recent
        state.last_active = event.at
    elif isinstance(event, ev.TurnStarted):
        state.turn_queue = [t for t in state.turn_queue if t != event.turn]
        state.turn_running = event.turn
        state.turn_epoch = event.epoch
    elif isinstance(event, ev.TurnFinished):
        state.turn_queue = [t for t in state.turn_queue if t != event.turn]
        if state.turn_running == event.turn:
            state.turn_running = 0
            state.turn_epoch = 0
        state.last_active = max(state.last_active, event.at)
    elif isinstance(event, ev.TurnUnknown):
        if state.turn_running == event.turn:
            state.turn_running = 0
            state.turn_epoch = 0
        state.turns_unknown = [*state.turns_unknown, event.turn]
    elif isinstance(event, ev.TurnResolved):
        state.turns_unknown = [t for t in state.turns_unknown if t != event.turn]


def fold(session_id: str, stream: Iterable[tuple[int, ev.Event]]) -> SessionState:
    """Fold a whole stream of ``(version, event)`` pairs from the empty state."""
    state = SessionState(session_id=session_id)
    for version, event in stream:
        apply(state, event, version)
    return state


_STATE_ENCODER = msgspec.msgpack.Encoder()
_STATE_DECODER = msgspec.msgpack.Decoder(SessionState)


def encode_state(state: SessionState) -> bytes:
    """Encode a state for the same-transaction head row: all of it but the submission window
    (``recent_submissions``, up to 256 ids: stored apart, one row an admission, instead of
    rewritten with every write of the session)."""
    if state.recent_submissions:
        state = msgspec.structs.replace(state, recent_submissions={})
    return _STATE_ENCODER.encode(state)


def decode_state(data: bytes) -> SessionState:
    """Decode a head row back into a state."""
    return _STATE_DECODER.decode(data)
