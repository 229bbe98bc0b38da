"""The event catalog: stable dotted topics, msgpack round trips, registry errors."""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
import pytest

from hermes_es import events as ev

SAMPLE_MESSAGE = ev.Message(
    seq=3,
    uid="u3",
    role="assistant",
    content=[{"type": "text", "text": "hi"}],
    tool_calls=[ev.ToolCall(id="c1", name="ls", arguments='{"a": 1}')],
    reasoning="because",
    tokens_in=4,
    tokens_out=5,
    media=[ev.Media(kind="image", path="/tmp/x.png", text="a cat", note="10x10")],
    finish_reason="stop",
    at=2.5,
)

SAMPLES: list[ev.Event] = [
    ev.SessionStarted(
        at=1.0,
        actor="cli:ana",
        session_id="20240101_000000_abcdef",
        source="cli",
        model_config={"reasoning_effort": "high"},
        launch_flags={"yolo": True},
        tools=["ls"],
        parent_id="20231231_000000_abcdef",
        parent_kind="branch",
        title="t",
    ),
    ev.SessionContinued(at=1.0, child_id="c"),
    ev.SessionEnded(at=1.0, reason="user_exit"),
    ev.SessionReopened(at=1.0),
    ev.SessionResumed(at=1.0, config={"toolsets": ["web"]}),
    ev.WorkspaceChanged(at=1.0, cwd="/a/b", workspace_key="/a"),
    ev.ReasoningChanged(at=1.0, level="low"),
    ev.SessionDeleted(at=1.0, session_id="s", events=3, messages=2, digest="ab" * 32),
    ev.MessageAppended(at=1.0, message=SAMPLE_MESSAGE),
    ev.TurnAppended(at=1.0, messages=[SAMPLE_MESSAGE, SAMPLE_MESSAGE]),
    ev.TokenUsageRecorded(at=1.0, tokens_in=1, tokens_out=2, model="m"),
    ev.RewoundTo(at=1.0, seq=1, removed=[2, 3]),
    ev.MessageEdited(at=1.0, target_seq=1, message=SAMPLE_MESSAGE),
    ev.CompactedInPlace(at=1.0, archived=[0, 1], summary=[SAMPLE_MESSAGE]),
    ev.HistoryImported(at=1.0, messages=[SAMPLE_MESSAGE], states=["active"], origin="x.jsonl"),
    ev.TitleSet(at=1.0, title="new", kind="derived"),
    ev.SessionArchived(at=1.0, reason="sweep"),
    ev.SessionUnarchived(at=1.0, reason="resumed"),
    ev.SessionPinned(at=1.0),
    ev.SessionUnpinned(at=1.0),
    ev.SessionHidden(at=1.0, hidden=False),
    ev.PromptStored(at=1.0, sha256="00" * 32, text="be kind"),
    ev.PromptRefreshRequested(at=1.0),
    ev.SystemPromptRebuilt(at=1.0, prompt_hash="11" * 32, reason="first_turn"),
    ev.StoredPromptCleared(at=1.0),
    ev.ToolsPinned(at=1.0, tools=["a", "b"]),
    ev.GatewayEpochBegan(at=1.0, epoch=1, instance_id="i1", pid=42),
    ev.SessionCreateClaimed(at=1.0, create_id="c1", session_id="20250305_091523_a1b2c3"),
    ev.TurnAdmitted(at=1.0, turn=1, submission_id="s1", client_kind="cli", text="hi"),
    ev.TurnStarted(at=1.0, turn=1, epoch=1),
    ev.TurnFinished(at=1.0, turn=1, outcome="completed", seqs=[0, 1]),
    ev.TurnUnknown(at=1.0, turn=1, epoch=1, detected_epoch=2),
    ev.TurnResolved(at=1.0, turn=1, resolution="discard"),
]


def test_samples_cover_the_core_catalog() -> None:
    """Every core event type has a sample here, and each sample's type is registered."""
    topics = {type(e).topic for e in SAMPLES}
    assert len(topics) == len(SAMPLES)
    assert topics <= set(ev.all_topics())
    core = {getattr(ev, name) for name in ev.__all__ if isinstance(getattr(ev, name), type)}
    assert {cls.topic for cls in core if issubclass(cls, ev.Event) and cls.topic} == topics


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_round_trip(event: ev.Event) -> None:
    """encode/decode under the event's topic gives back an equal event of the same type."""
    data = ev.encode(event)
    back = ev.decode(event.topic, data)
    assert type(back) is type(event)
    assert back == event


def test_topics_are_dotted_and_unique() -> None:
    """Every topic is a dotted ``hermes.*`` name that maps back to its class."""
    for topic in ev.all_topics():
        assert topic.startswith("hermes.") and topic.count(".") >= 2
        assert ev.event_type(topic).topic == topic


def test_events_are_frozen() -> None:
    """Events cannot be changed after creation."""
    event = ev.SessionEnded(at=1.0, reason="x")
    with pytest.raises(AttributeError):
        event.reason = "y"  # type: ignore[misc]


def test_unknown_topic_is_a_lookup_error() -> None:
    """Decoding or resolving an unregistered topic raises LookupError naming it."""
    with pytest.raises(LookupError, match=r"hermes\.nope"):
        ev.decode("hermes.nope", b"\x80")
    with pytest.raises(LookupError, match=r"hermes\.nope"):
        ev.event_type("hermes.nope")


def test_register_rejects_bad_and_duplicate_topics() -> None:
    """A topic must be dotted and may belong to one class only."""

    class Undotted(ev.Event, frozen=True, kw_only=True):
        topic: ClassVar[str] = "undotted"

    with pytest.raises(TypeError, match="dotted"):
        ev.register(Undotted)

    class Clash(ev.Event, frozen=True, kw_only=True):
        topic: ClassVar[str] = ev.TitleSet.topic

    with pytest.raises(TypeError, match="already used by TitleSet"):
        ev.register(Clash)
    assert ev.event_type(ev.TitleSet.topic) is ev.TitleSet


def test_old_payload_decodes_with_defaults() -> None:
    """A stored event missing fields added later decodes with their defaults."""
    old: dict[str, Any] = {"at": 5.0, "session_id": "s", "source": "cli"}
    back = ev.decode(ev.SessionStarted.topic, msgspec.msgpack.encode(old))
    assert isinstance(back, ev.SessionStarted)
    assert (back.profile, back.tools, back.parent_kind, back.actor) == ("default", None, "", "")


def test_display_topics() -> None:
    """Exactly the transcript-changing events are display topics."""
    assert {
        ev.MessageAppended.topic,
        ev.TurnAppended.topic,
        ev.RewoundTo.topic,
        ev.MessageEdited.topic,
        ev.CompactedInPlace.topic,
        ev.HistoryImported.topic,
    } == ev.DISPLAY_TOPICS


def test_to_builtins_adds_type() -> None:
    """to_builtins gives JSON-ready fields plus the topic under ``type``."""
    data = ev.to_builtins(ev.MessageAppended(at=1.0, message=SAMPLE_MESSAGE))
    assert data["type"] == "hermes.message.appended"
    assert data["message"]["tool_calls"] == [{"id": "c1", "name": "ls", "arguments": '{"a": 1}'}]
    assert msgspec.json.decode(msgspec.json.encode(data)) == data
