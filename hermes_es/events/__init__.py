"""The event catalog: every change to a session is one of these immutable events."""

from __future__ import annotations

from hermes_es.events.base import (
    Event,
    all_topics,
    decode,
    encode,
    event_type,
    register,
    to_builtins,
)
from hermes_es.events.curation import (
    SessionArchived,
    SessionHidden,
    SessionPinned,
    SessionUnarchived,
    SessionUnpinned,
    TitleSet,
)
from hermes_es.events.messages import (
    ROLES,
    CompactedInPlace,
    HistoryImported,
    Media,
    Message,
    MessageAppended,
    MessageEdited,
    RewoundTo,
    TokenUsageRecorded,
    ToolCall,
    TurnAppended,
)
from hermes_es.events.prompts import (
    PromptRefreshRequested,
    PromptStored,
    StoredPromptCleared,
    SystemPromptRebuilt,
    ToolsPinned,
)
from hermes_es.events.session import (
    PARENT_KINDS,
    ReasoningChanged,
    SessionContinued,
    SessionCreateClaimed,
    SessionDeleted,
    SessionEnded,
    SessionReopened,
    SessionResumed,
    SessionStarted,
    WorkspaceChanged,
)
from hermes_es.events.turns import (
    RESOLUTIONS,
    TURN_OUTCOMES,
    GatewayEpochBegan,
    TurnAdmitted,
    TurnFinished,
    TurnResolved,
    TurnStarted,
    TurnUnknown,
)

DISPLAY_TOPICS = frozenset(
    {
        MessageAppended.topic,
        TurnAppended.topic,
        RewoundTo.topic,
        MessageEdited.topic,
        CompactedInPlace.topic,
        HistoryImported.topic,
    }
)
"""Topics whose events change what a display export shows (they bump the display version)."""

__all__ = [
    "DISPLAY_TOPICS",
    "PARENT_KINDS",
    "RESOLUTIONS",
    "ROLES",
    "TURN_OUTCOMES",
    "CompactedInPlace",
    "Event",
    "GatewayEpochBegan",
    "HistoryImported",
    "Media",
    "Message",
    "MessageAppended",
    "MessageEdited",
    "PromptRefreshRequested",
    "PromptStored",
    "ReasoningChanged",
    "RewoundTo",
    "SessionArchived",
    "SessionContinued",
    "SessionCreateClaimed",
    "SessionDeleted",
    "SessionEnded",
    "SessionHidden",
    "SessionPinned",
    "SessionReopened",
    "SessionResumed",
    "SessionStarted",
    "SessionUnarchived",
    "SessionUnpinned",
    "StoredPromptCleared",
    "SystemPromptRebuilt",
    "TitleSet",
    "TokenUsageRecorded",
    "ToolCall",
    "ToolsPinned",
    "TurnAdmitted",
    "TurnAppended",
    "TurnFinished",
    "TurnResolved",
    "TurnStarted",
    "TurnUnknown",
    "WorkspaceChanged",
    "all_topics",
    "decode",
    "encode",
    "event_type",
    "register",
    "to_builtins",
]
