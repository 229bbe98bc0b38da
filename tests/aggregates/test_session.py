"""Pure session decisions: which events a command yields for a state, or why it is refused."""

from __future__ import annotations

import msgspec
import pytest

from hermes_es import events as ev
from hermes_es.aggregates import session as agg
from hermes_es.aggregates.state import SessionState, apply, fold
from hermes_es.aggregates.validation import check_source, check_title, content_text
from hermes_es.errors import InvariantError, ValidationError

SID = "20240101_000000_abcdef"


def draft(role: str = "user", content: str = "hi", **kw: object) -> ev.Message:
    """A message draft (seq and uid are assigned by the decision)."""
    return msgspec.convert(
        {"seq": -1, "uid": "", "role": role, "content": content, **kw}, ev.Message
    )


def live(*roles: str) -> SessionState:
    """A started session holding one appended message per role given."""
    events: list[ev.Event] = agg.start(SID, at=1.0, source="cli")
    state = fold(SID, enumerate(events, start=1))
    for role in roles:
        for e in agg.append(state, [draft(role, f"{role} text")], at=2.0):
            apply(state, e, state.version + 1)
    return state


def test_append_assigns_seq_uid_and_time() -> None:
    """One draft becomes MessageAppended with the next seq, a fresh uid and the time."""
    state = live("user")
    [event] = agg.append(state, [draft(uid="")], at=9.0, actor="me")
    assert isinstance(event, ev.MessageAppended)
    assert (event.message.seq, event.message.at, event.actor) == (1, 9.0, "me")
    assert len(event.message.uid) == agg.UID_LENGTH == 16
    assert event.message.uid.isalnum() and event.message.uid.islower()


def test_append_keeps_client_uid_and_time() -> None:
    """A client uid and message time are kept."""
    [event] = agg.append(live(), [draft(uid="mine", at=3.0)], at=9.0)
    assert isinstance(event, ev.MessageAppended)
    assert (event.message.uid, event.message.at) == ("mine", 3.0)


def test_turn_is_one_event() -> None:
    """Several drafts become one TurnAppended with consecutive seqs."""
    call = draft("assistant", "", tool_calls=[{"id": "c", "name": "ls"}])
    [event] = agg.append(live(), [call, draft("tool", "out", tool_call_id="c")], at=2.0)
    assert isinstance(event, ev.TurnAppended)
    assert [m.seq for m in event.messages] == [0, 1]


def test_append_revives_ended_and_swept() -> None:
    """Appending to an ended, sweep-archived session reopens and unarchives it first."""
    state = live()
    state.ended, state.archived = True, "sweep"
    events = agg.append(state, [draft()], at=2.0)
    assert [type(e) for e in events] == [
        ev.SessionReopened,
        ev.SessionUnarchived,
        ev.MessageAppended,
    ]
    state.archived = "user"
    assert [type(e) for e in agg.append(state, [draft()], at=2.0)] == [
        ev.SessionReopened,
        ev.MessageAppended,
    ]


def test_commands_on_a_missing_stream_are_refused() -> None:
    """A stream at version 0 does not exist: every command is refused."""
    empty = SessionState(session_id=SID)
    with pytest.raises(InvariantError, match="does not exist"):
        agg.append(empty, [draft()], at=1.0)
    with pytest.raises(InvariantError, match="does not exist"):
        agg.set_title(empty, "x", kind="user", at=1.0)


def test_rewind_decisions() -> None:
    """Rewind lists the active seqs after the target; nothing to remove is no event."""
    state = live("user", "assistant", "user", "assistant")
    [event] = agg.rewind(state, 1, at=2.0)
    assert isinstance(event, ev.RewoundTo) and event.removed == [2, 3]
    assert agg.rewind(state, 3, at=2.0) == []
    with pytest.raises(InvariantError, match="not an active message"):
        agg.rewind(state, 4, at=2.0)


def test_rewind_turns_targets() -> None:
    """rewind_turns finds the seq before the n-th last user turn, -1 for all, None if too few."""
    state = live("user", "assistant", "user", "assistant")
    assert agg.rewind_turns(state, [0, 2], 1) == 1
    assert agg.rewind_turns(state, [0, 2], 2) == -1
    assert agg.rewind_turns(state, [0, 2], 3) is None
    with pytest.raises(ValidationError, match="positive number"):
        agg.rewind_turns(state, [0, 2], 0)


def test_edit_ignores_open_tool_calls() -> None:
    """An edit is validated on its own, never as an answer to a pending tool call."""
    state = live("user")
    state.open_tool_calls = ["pending"]
    [event] = agg.edit(state, 0, draft(content="new"), at=2.0)
    assert isinstance(event, ev.MessageEdited) and event.message.seq == 1
    with pytest.raises(ValidationError, match="tool results cannot be edited"):
        agg.edit(state, 0, draft("tool", "x", tool_call_id="pending"), at=2.0)


def test_compact_decision() -> None:
    """Compaction numbers its summary after the last seq and refuses inactive targets."""
    state = live("user", "assistant")
    [event] = agg.compact(state, [0], [draft(content="summary")], at=2.0)
    assert isinstance(event, ev.CompactedInPlace)
    assert (event.archived, [m.seq for m in event.summary]) == ([0], [2])
    with pytest.raises(InvariantError, match="cannot compact message 5"):
        agg.compact(state, [0, 5], [], at=2.0)


def test_continue_into_ends_and_refuses_twice() -> None:
    """Continuing ends a live session once; an already continued one is refused."""
    state = live()
    events = agg.continue_into(state, "kid", at=2.0)
    assert [e.topic for e in events] == [ev.SessionContinued.topic, ev.SessionEnded.topic]
    state.ended = True
    assert [e.topic for e in agg.continue_into(state, "kid", at=2.0)] == [ev.SessionContinued.topic]
    state.continued_into = "kid"
    with pytest.raises(InvariantError, match="already continues in kid"):
        agg.continue_into(state, "kid2", at=2.0)


def test_idempotent_curation() -> None:
    """Repeating a curation command yields no event; a sweep never relabels a user archive."""
    state = live()
    assert agg.pin(state, False, at=1.0) == []
    assert agg.hide(state, False, at=1.0) == []
    assert agg.unarchive(state, at=1.0) == []
    assert agg.reopen(state, at=1.0) == []
    assert agg.request_refresh(state, at=1.0) == []  # no stored prompt
    assert agg.clear_prompt(state, reason="r", at=1.0) == []
    state.archived = "user"
    assert agg.archive(state, "sweep", at=1.0) == []
    state.archived = "sweep"
    assert [type(e) for e in agg.archive(state, "user", at=1.0)] == [ev.SessionArchived]
    state.ended = True
    assert agg.end(state, "again", at=1.0) == []
    with pytest.raises(ValidationError, match="needs a reason"):
        agg.end(state, "", at=1.0)


def test_set_title_noop_and_kinds() -> None:
    """The same title and kind is no event; a different kind is recorded."""
    state = live()
    state.title, state.title_kind = "t", "user"
    assert agg.set_title(state, " t ", kind="user", at=1.0) == []
    [event] = agg.set_title(state, "t", kind="derived", at=1.0)
    assert isinstance(event, ev.TitleSet) and event.kind == "derived"


def test_start_validation() -> None:
    """A session cannot be its own parent; a parent kind needs a parent."""
    with pytest.raises(ValidationError, match="its own parent"):
        agg.start(SID, at=1.0, source="cli", parent_id=SID, parent_kind="branch")
    with pytest.raises(ValidationError, match="needs a parent id"):
        agg.start(SID, at=1.0, source="cli", parent_kind="branch")


def test_import_history_chunks_and_renumbers() -> None:
    """Imported messages are renumbered from next_seq and split into chunks."""
    state = live("user")
    msgs = [draft(content=f"old {i}") for i in range(5)]
    events = agg.import_history(state, msgs, ["active"] * 5, origin="x", at=1.0, chunk=2)
    assert [len(e.messages) for e in events if isinstance(e, ev.HistoryImported)] == [2, 2, 1]
    seqs = [m.seq for e in events if isinstance(e, ev.HistoryImported) for m in e.messages]
    assert seqs == [1, 2, 3, 4, 5]
    with pytest.raises(ValidationError, match="needs a state"):
        agg.import_history(state, msgs, ["active"], origin="x", at=1.0)


def test_validation_helpers() -> None:
    """Titles are trimmed and collapsed; sources are short lowercase tags; parts join text."""
    assert check_title("  a \u00a0 b  ") == "a b"
    assert check_source("telegram") == "telegram"
    with pytest.raises(ValidationError):
        check_source("x" * 33)
    assert content_text([{"type": "text", "text": "a"}, {"text": 3}, {"text": "b"}]) == "a\nb"
