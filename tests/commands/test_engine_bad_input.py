"""Bad input to the engine: a typed HermesError with a clear message, and nothing written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hermes_es.commands.delete import delete_session
from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import (
    AmbiguousSessionError,
    HermesError,
    InvariantError,
    SessionNotFoundError,
    ValidationError,
)

A = "20240101_120000_aaaaaa"
B = "20240101_120000_aabbbb"


def snapshot(engine: SessionEngine) -> tuple[int, int, int, int]:
    """Row counts of the log, sessions, messages and the FTS index."""
    conn = engine.store.connection()
    index = "messages_fts_docsize" if engine.backend.kind == "sqlite" else "messages_fts"
    return tuple(  # type: ignore[return-value]
        int(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchall()[0][0])
        for t in ("events", "sessions", "messages", index)
    )


@pytest.fixture
def two(engine: SessionEngine) -> SessionEngine:
    """An engine holding sessions A (one user message, titled) and B."""
    engine.start_session("cli", session_id=A, cwd="", title="alpha")
    engine.start_session("cli", session_id=B, cwd="")
    engine.append_message(A, "user", "hello")
    return engine


def refused(
    engine: SessionEngine,
    error: type[HermesError],
    match: str,
    call: Callable[..., Any],
    *args: Any,
    **kwargs: Any,
) -> HermesError:
    """Run ``call``; assert it raises ``error`` matching ``match`` and writes nothing."""
    before = snapshot(engine)
    with pytest.raises(error, match=match) as caught:
        call(*args, **kwargs)
    assert snapshot(engine) == before
    return caught.value


def test_unknown_session_id(two: SessionEngine) -> None:
    """Appending to an unknown id raises SessionNotFoundError naming the id."""
    err = refused(
        two,
        SessionNotFoundError,
        "no session '20991231_000000_ffffff'",
        two.append_message,
        "20991231_000000_ffffff",
        "user",
        "hi",
    )
    assert err.subject == "20991231_000000_ffffff"
    refused(two, SessionNotFoundError, "nope", two.get, "nope")
    refused(two, SessionNotFoundError, "no session matches 'zzz'", two.resolve, "zzz")
    refused(two, SessionNotFoundError, "no session", two.resolve, "   ")


def test_ambiguous_prefix_lists_candidates(two: SessionEngine) -> None:
    """A prefix matching two sessions raises AmbiguousSessionError listing both."""
    err = refused(two, AmbiguousSessionError, "matches several sessions", two.resolve, "20240101")
    assert isinstance(err, AmbiguousSessionError)
    assert err.candidates == [A, B]
    assert A in str(err) and B in str(err)


def test_unique_prefix_and_title_resolve(two: SessionEngine) -> None:
    """A unique prefix, a full id and a title (any case) each resolve to one session."""
    assert two.resolve("20240101_120000_aab") == B
    assert two.resolve(A) == A
    assert two.resolve("ALPHA") == A


@pytest.mark.parametrize(
    ("role", "content", "fields", "match"),
    [
        ("user", "", {}, "empty user message"),
        ("user", "  \n\t", {}, "empty user message"),
        ("system", "", {}, "empty system message"),
        ("user", [{"type": "image_url", "image_url": "x"}], {}, "empty user message"),
        ("assistant", "", {}, "empty assistant message with no tool calls"),
        ("Human", "hi", {}, "invalid role 'Human'"),
        ("", "hi", {}, "invalid role ''"),
        ("user", "hi", {"tool_calls": [{"id": "1", "name": "x"}]}, "only assistant messages"),
        ("assistant", "hi", {"tool_calls": [{"id": "", "name": "x"}]}, "needs an id and a name"),
        ("user", "hi", {"tool_call_id": "c1"}, "only tool results carry a tool_call_id"),
        ("tool", "result", {}, "needs a tool_call_id"),
        ("user", "hi", {"tokens_in": "many"}, "invalid message"),
        ("user", 42, {}, "invalid message"),
    ],
)
def test_invalid_messages_are_refused(
    two: SessionEngine, role: str, content: Any, fields: dict[str, Any], match: str
) -> None:
    """Malformed messages raise ValidationError and write nothing."""
    refused(two, ValidationError, match, two.append_message, A, role, content, **fields)


def test_empty_turn_is_refused(two: SessionEngine) -> None:
    """A turn with no messages is refused."""
    refused(two, ValidationError, "at least one message", two.append_turn, A, [])


def test_tool_result_without_matching_call(two: SessionEngine) -> None:
    """A tool result answering no open tool call raises InvariantError naming the call id."""
    err = refused(
        two,
        InvariantError,
        "answers 'call-x'",
        two.append_message,
        A,
        "tool",
        "r",
        tool_call_id="call-x",
    )
    assert err.subject == "call-x"


def test_tool_result_after_rewind_of_its_call(two: SessionEngine) -> None:
    """Once the call is rewound away, a result for it is refused."""
    two.append_message(A, "assistant", "", tool_calls=[{"id": "c1", "name": "ls"}])
    two.rewind(A, 0)
    refused(
        two, InvariantError, "answers 'c1'", two.append_message, A, "tool", "r", tool_call_id="c1"
    )


@pytest.mark.parametrize(
    ("title", "match"),
    [
        ("x" * 101, "101 characters long; the limit is 100"),
        ("line one\nline two", "control characters"),
        ("tab\there", "control characters"),
        ("bell\x07", "control characters"),
        ("nul\x00byte", "control characters"),
        ("zero\u200bwidth", "control characters"),
        ("rtl\u202eoverride", "control characters"),
    ],
)
def test_bad_titles(two: SessionEngine, title: str, match: str) -> None:
    """Oversized titles and titles with control characters are refused everywhere."""
    refused(two, ValidationError, match, two.set_title, B, title)
    refused(two, ValidationError, match, two.start_session, "cli", cwd="", title=title)


def test_title_of_exactly_100_chars_is_accepted(two: SessionEngine) -> None:
    """100 characters is the limit, inclusive; inner whitespace runs are collapsed."""
    assert two.set_title(B, "y" * 100).title == "y" * 100
    assert two.set_title(B, "  two   words ").title == "two words"


def test_duplicate_title_is_refused(two: SessionEngine) -> None:
    """A title held by another session (any case) is refused, naming the holder."""
    refused(two, ValidationError, f"already used by session {A}", two.set_title, B, "ALPHA")
    refused(two, ValidationError, "already used", two.start_session, "cli", cwd="", title="alpha")


def test_rewind_to_inactive_or_unknown_message(two: SessionEngine) -> None:
    """Rewinding to a rewound, edited or never-stored message raises InvariantError."""
    two.append_message(A, "assistant", "a")
    two.append_message(A, "user", "q2")
    two.rewind(A, 1)
    refused(two, InvariantError, "cannot rewind to message 2", two.rewind, A, 2)
    refused(two, InvariantError, "cannot rewind to message 99", two.rewind, A, 99)
    two.edit_message(A, 0, "hello again")
    refused(two, InvariantError, "cannot rewind to message 0", two.rewind, A, 0)
    refused(two, InvariantError, "cannot edit message 0", two.edit_message, A, 0, "x")


def test_compact_bad_targets(two: SessionEngine) -> None:
    """Compaction needs active targets; editing a tool result is refused."""
    refused(two, InvariantError, "nothing to compact", two.compact, A, [], [])
    refused(two, InvariantError, "cannot compact message 7", two.compact, A, [7], [])
    two.append_message(A, "assistant", "", tool_calls=[{"id": "c1", "name": "ls"}])
    two.append_message(A, "tool", "out", tool_call_id="c1")
    refused(
        two,
        ValidationError,
        "tool results cannot be edited",
        two.edit_message,
        A,
        2,
        "x",
        role="tool",
    )


def test_bad_session_starts(two: SessionEngine) -> None:
    """Bad source tags, parent kinds, duplicate ids and unknown parents are refused."""
    refused(two, ValidationError, "invalid source tag 'CLI!'", two.start_session, "CLI!", cwd="")
    refused(two, ValidationError, "already exists", two.start_session, "cli", session_id=A, cwd="")
    refused(
        two,
        ValidationError,
        "invalid parent kind 'fork'",
        two.start_session,
        "cli",
        cwd="",
        parent_id=A,
        parent_kind="fork",
    )
    refused(
        two, ValidationError, "needs a parent kind", two.start_session, "cli", cwd="", parent_id=A
    )
    refused(
        two,
        SessionNotFoundError,
        "no session '20000101_000000_000000'",
        two.start_session,
        "cli",
        cwd="",
        parent_id="20000101_000000_000000",
        parent_kind="branch",
    )


def test_append_to_deleted_session(two: SessionEngine) -> None:
    """After a physical delete, appends raise InvariantError saying it was deleted."""
    delete_session(two.store, B, actor="test", scrub=False)
    refused(two, InvariantError, f"session {B} was deleted", two.append_message, B, "user", "x")
    refused(two, InvariantError, "was deleted", two.set_title, B, "again")
    refused(two, SessionNotFoundError, "no session matches", two.resolve, B)


def test_curation_of_unknown_session(two: SessionEngine) -> None:
    """Every curation command on an unknown id raises SessionNotFoundError."""
    ghost = "20991231_235959_abcdef"
    for call in (two.pin, two.archive, two.unarchive, two.end_session, two.reopen, two.hide):
        refused(two, SessionNotFoundError, ghost, call, ghost)
    refused(two, SessionNotFoundError, ghost, two.rewind, ghost, 0)
    refused(two, SessionNotFoundError, ghost, two.continue_session, ghost, [])
    refused(two, SessionNotFoundError, ghost, two.request_prompt_refresh, [A, ghost])
