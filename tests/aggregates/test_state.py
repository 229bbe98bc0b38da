"""The pure fold: active ranges, counters, display version, preview, tool calls, codec."""

from __future__ import annotations

import msgspec
import pytest

from hermes_es import events as ev
from hermes_es.aggregates.state import (
    PREVIEW_CHARS,
    SessionState,
    apply,
    decode_state,
    encode_state,
    fold,
)

SID = "20240101_000000_abcdef"


def msg(seq: int, role: str = "user", content: str = "", **kw: object) -> ev.Message:
    """A stored message with ``seq``."""
    return msgspec.convert(
        {"seq": seq, "uid": f"u{seq}", "role": role, "content": content or f"m{seq}", **kw},
        ev.Message,
    )


def started(**kw: object) -> ev.SessionStarted:
    """A SessionStarted for SID."""
    return ev.SessionStarted(at=10.0, session_id=SID, source="cli", **kw)  # type: ignore[arg-type]


def run(*events: ev.Event) -> SessionState:
    """Fold ``events`` as versions 1, 2, …"""
    return fold(SID, enumerate(events, start=1))


def appended(*seqs: int) -> list[ev.Event]:
    """One MessageAppended per seq."""
    return [ev.MessageAppended(at=20.0 + s, message=msg(s)) for s in seqs]


def test_empty_fold() -> None:
    """No events: version 0, nothing active."""
    state = fold(SID, [])
    assert (state.version, state.active, state.next_seq) == (0, [], 0)


def test_start_fields() -> None:
    """SessionStarted sets identity, reasoning from model_config, prompt version and tools."""
    state = run(
        started(
            title="T",
            model="m",
            model_config={"reasoning_effort": "high"},
            prompt_hash="ab",
            tools=["x"],
            parent_id="p",
            parent_kind="branch",
        )
    )
    assert (state.title, state.title_kind, state.reasoning, state.model) == (
        "T",
        "user",
        "high",
        "m",
    )
    assert (state.prompt_hash, state.prompt_version, state.tools) == ("ab", 1, ["x"])
    assert (state.parent_id, state.parent_kind, state.started_at) == ("p", "branch", 10.0)
    assert run(started()).prompt_version == 0 and run(started()).title_kind == ""


def test_appends_grow_one_range() -> None:
    """Contiguous appends are one active range; counters follow."""
    state = run(started(), *appended(0, 1, 2))
    assert state.active == [[0, 3]]
    assert (state.next_seq, state.message_count, state.active_count) == (3, 3, 3)
    assert state.last_active == 22.0


def test_rewind_trims_the_range() -> None:
    """A rewind removes the listed seqs; later appends start a new range."""
    state = run(started(), *appended(0, 1, 2, 3), ev.RewoundTo(at=30.0, seq=1, removed=[2, 3]))
    assert state.active == [[0, 2]] and state.active_count == 2 and state.next_seq == 4
    apply(state, ev.MessageAppended(at=31.0, message=msg(4)), 7)
    assert state.active == [[0, 2], [4, 5]]
    assert state.active_seqs() == [0, 1, 4]
    assert state.is_active(4) and not state.is_active(2) and not state.is_active(5)


def test_edit_splits_the_range() -> None:
    """Editing a middle message removes it and adds the replacement's seq."""
    edit = ev.MessageEdited(at=30.0, target_seq=1, message=msg(3, content="fixed"))
    state = run(started(), *appended(0, 1, 2), edit)
    assert state.active == [[0, 1], [2, 4]]
    assert (state.message_count, state.active_count, state.next_seq) == (4, 3, 4)


def test_compaction_archives_and_adds_summary() -> None:
    """Compaction removes archived seqs, counts them, and appends the summary as active."""
    compact = ev.CompactedInPlace(at=30.0, archived=[0, 1], summary=[msg(4, content="sum")])
    state = run(started(), *appended(0, 1, 2, 3), compact)
    assert state.active == [[2, 5]]
    assert (state.compacted_count, state.message_count, state.active_count) == (2, 5, 3)
    empty = ev.CompactedInPlace(at=31.0, archived=[2], summary=[])
    apply(state, empty, 7)
    assert state.active == [[3, 5]] and state.compacted_count == 3


def test_display_version_bumps_only_for_display_topics() -> None:
    """Only transcript-changing events move display_version; the version moves always."""
    state = run(started(), *appended(0, 1))
    assert state.display_version == 3
    others: list[ev.Event] = [
        ev.TitleSet(at=1.0, title="x"),
        ev.SessionPinned(at=1.0),
        ev.SessionArchived(at=1.0),
        ev.SessionEnded(at=1.0, reason="r"),
        ev.SessionReopened(at=1.0),
        ev.TokenUsageRecorded(at=1.0, tokens_in=1),
        ev.PromptRefreshRequested(at=1.0),
        ev.WorkspaceChanged(at=1.0, cwd="/x", workspace_key="/x"),
        ev.SessionResumed(at=1.0),
    ]
    for version, event in enumerate(others, start=4):
        apply(state, event, version)
        assert event.topic not in ev.DISPLAY_TOPICS
        assert (state.version, state.display_version) == (version, 3)
    display: list[ev.Event] = [
        ev.RewoundTo(at=2.0, seq=0, removed=[1]),
        ev.MessageEdited(at=2.0, target_seq=0, message=msg(2)),
        ev.MessageAppended(at=2.0, message=msg(3)),
        ev.TurnAppended(at=2.0, messages=[msg(4), msg(5)]),
        ev.CompactedInPlace(at=2.0, archived=[2], summary=[]),
        ev.HistoryImported(at=2.0, messages=[msg(6)], states=["active"]),
    ]
    for version, event in enumerate(display, start=100):
        apply(state, event, version)
        assert event.topic in ev.DISPLAY_TOPICS
        assert state.display_version == version


def test_preview_is_first_user_text_flattened() -> None:
    """The preview is the first user message, whitespace collapsed, clipped; later ones ignored."""
    long = "first   line\n" + "word " * 100
    events = [
        started(),
        ev.MessageAppended(at=1.0, message=msg(0, "assistant", "hello from the model")),
        ev.MessageAppended(at=2.0, message=msg(1, "user", long)),
        ev.MessageAppended(at=3.0, message=msg(2, "user", "second question")),
    ]
    state = run(*events)
    assert state.preview.startswith("first line word word")
    assert len(state.preview) == PREVIEW_CHARS
    parts = msg(0, "user", content="", **{})
    structured = msgspec.structs.replace(
        parts, content=[{"type": "text", "text": "look at"}, {"type": "image"}]
    )
    assert run(started(), ev.MessageAppended(at=1.0, message=structured)).preview == "look at"


def test_tool_calls_open_and_close() -> None:
    """A tool call stays open until its result; a rewind drops only the calls it removed."""
    call = msg(
        0, "assistant", "x", tool_calls=[{"id": "c1", "name": "ls"}, {"id": "c2", "name": "cat"}]
    )
    state = run(started(), ev.MessageAppended(at=1.0, message=call))
    assert state.open_tool_calls == ["c1", "c2"]
    apply(state, ev.MessageAppended(at=2.0, message=msg(1, "tool", "r", tool_call_id="c1")), 3)
    assert state.open_tool_calls == ["c2"]
    apply(state, ev.RewoundTo(at=3.0, seq=0, removed=[1]), 4)
    assert state.open_tool_calls == ["c2"]  # made by message 0, which the rewind kept
    later = msg(2, "assistant", "y", tool_calls=[{"id": "c3", "name": "ls"}])
    apply(state, ev.MessageAppended(at=4.0, message=later), 5)
    apply(state, ev.RewoundTo(at=5.0, seq=0, removed=[2]), 6)
    assert state.open_tool_calls == ["c2"] and state.open_call_seqs == [0]


def test_tokens_add_up() -> None:
    """Message tokens and usage events both count."""
    state = run(
        started(),
        ev.MessageAppended(at=1.0, message=msg(0, "assistant", "a", tokens_in=5, tokens_out=7)),
        ev.TokenUsageRecorded(at=2.0, tokens_in=3, tokens_out=1),
    )
    assert (state.tokens_in, state.tokens_out) == (8, 8)


def test_curation_flags_fold() -> None:
    """Title, archive, pin, hide, end/reopen, continue and prompt events set their fields."""
    state = run(
        started(title="old"),
        ev.TitleSet(at=1.0, title="new", kind="derived"),
        ev.SessionArchived(at=1.0, reason="sweep"),
        ev.SessionPinned(at=1.0),
        ev.SessionHidden(at=1.0),
        ev.SessionEnded(at=1.0, reason="compression"),
        ev.SessionContinued(at=1.0, child_id="kid"),
        ev.ReasoningChanged(at=1.0, level="low"),
        ev.SystemPromptRebuilt(at=1.0, prompt_hash="p2"),
        ev.ToolsPinned(at=1.0, tools=[]),
    )
    assert (state.title, state.title_kind, state.archived) == ("new", "derived", "sweep")
    assert state.pinned and state.hidden and state.ended and state.end_reason == "compression"
    assert (state.continued_into, state.reasoning) == ("kid", "low")
    assert (state.prompt_hash, state.prompt_version, state.tools) == ("p2", 9, [])
    for version, event in enumerate(
        [
            ev.TitleSet(at=1.0, title=""),
            ev.SessionUnarchived(at=1.0),
            ev.SessionUnpinned(at=1.0),
            ev.SessionHidden(at=1.0, hidden=False),
            ev.SessionReopened(at=50.0),
            ev.PromptRefreshRequested(at=1.0),
        ],
        start=11,
    ):
        apply(state, event, version)
    assert (state.title, state.title_kind, state.archived) == ("", "", "")
    flags = (state.pinned, state.hidden, state.ended, state.refresh_pending)
    assert flags == (False, False, False, True)
    assert (state.end_reason, state.last_active) == ("", 50.0)
    apply(state, ev.StoredPromptCleared(at=1.0), 20)
    assert (state.prompt_hash, state.prompt_version) == ("", 20)


def test_history_import_counts_without_activating() -> None:
    """Imported rows count as messages and move next_seq, but are never active."""
    imported = ev.HistoryImported(
        at=1.0, messages=[msg(0, at=5.0), msg(1, "assistant", at=6.0)], states=["active", "active"]
    )
    state = run(started(), imported)
    assert (state.message_count, state.imported_count, state.active_count) == (2, 2, 0)
    assert (state.next_seq, state.active, state.preview) == (2, [], "m0")
    assert state.last_active == 10.0


@pytest.mark.parametrize("n", [0, 1, 50])
def test_state_codec_round_trip(n: int) -> None:
    """A head row decodes to an equal state."""
    state = run(started(tools=["a"]), *appended(*range(n)))
    assert decode_state(encode_state(state)) == state


def test_state_stays_small_for_long_sessions() -> None:
    """The state holds ranges and counters, not bodies: 5,000 messages encode to < 1 KiB."""
    events = [
        started(),
        *(ev.MessageAppended(at=1.0, message=msg(s, content="x" * 500)) for s in range(5000)),
    ]
    state = run(*events)
    assert len(encode_state(state)) < 1024
