"""Session ids: safe characters only, no stream prefixes, checked when a session starts."""

from __future__ import annotations

import pytest

from hermes_es import events as ev
from hermes_es.aggregates import session as agg
from hermes_es.aggregates.validation import check_session_id
from hermes_es.errors import ValidationError

VALID = [
    "20240101_000000_abcdef",
    "20240101_000000_abcdef01",
    "s1",
    "a",
    "Legacy-Session.v2_x",
    "9" * 128,
]

INVALID = [
    ("", "empty"),
    ("x" * 129, "limit is 128"),
    ("receipt:zzz", "reserved"),
    ("prompt:" + "ab" * 32, "reserved"),
    ("a:b", "reserved"),
    ("abc\ndef", "control characters"),
    ("abc\x00", "control characters"),
    ("tab\there", "control characters"),
    ("../../evil", "letters, digits"),
    ("a/b", "letters, digits"),
    ("a\\b", "letters, digits"),
    (".", "letters, digits"),
    ("..", "letters, digits"),
    (".hidden", "letters, digits"),
    ("_x", "letters, digits"),
    ("-rf", "letters, digits"),
    ("has space", "letters, digits"),
    ("é1", "letters, digits"),
    ("abc\u200b", "control characters"),
]


@pytest.mark.parametrize("sid", VALID)
def test_valid_session_id_is_returned(sid: str) -> None:
    """Letters, digits, '_', '.', '-' starting with a letter or digit, up to 128, are accepted."""
    assert check_session_id(sid) == sid


@pytest.mark.parametrize(("sid", "reason"), INVALID)
def test_invalid_session_id_is_refused_naming_it(sid: str, reason: str) -> None:
    """A bad id raises ValidationError quoting the id and saying what is wrong."""
    with pytest.raises(ValidationError) as info:
        check_session_id(sid)
    assert repr(sid)[:60] in info.value.message
    assert reason in info.value.message


@pytest.mark.parametrize(("sid", "_reason"), INVALID)
def test_start_refuses_invalid_session_id(sid: str, _reason: str) -> None:
    """The start decision refuses a bad id before deciding any event."""
    with pytest.raises(ValidationError, match="invalid session id"):
        agg.start(sid, at=1.0, source="cli")


def test_start_accepts_valid_session_id() -> None:
    """A valid id still starts a session with that id."""
    [event] = agg.start("s1", at=1.0, source="cli")
    assert isinstance(event, ev.SessionStarted)
    assert event.session_id == "s1"
