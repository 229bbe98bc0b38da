"""The event base class, the topic registry and the msgpack codec shared by every event.

Every event is a frozen, keyword-only msgspec Struct with a stable ``topic`` class attribute.
Topics are stored with each event and are never renamed: moving a class between modules does
not change what stored events decode to.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import msgspec

from hermes_es.store.codec import unpack


class Event(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of every event on a stream.

    Fields equal to their default are not written (``omit_defaults``): stored events stay
    small, and a field added later with a default decodes the same from old and new events.

    ``at`` is the wall-clock time (Unix seconds) the change happened; ``actor`` is the acting
    identity (``cli``, ``gateway:<provider>:<subject>``, ``import``, …), empty when unknown.
    """

    topic: ClassVar[str] = ""
    at: float
    actor: str = ""


E = TypeVar("E", bound=type[Event])

_BY_TOPIC: dict[str, type[Event]] = {}
_DECODERS: dict[str, msgspec.msgpack.Decoder[Any]] = {}
_ENCODER = msgspec.msgpack.Encoder()


def register(cls: E) -> E:
    """Class decorator: record an event type under its stable topic name."""
    topic = cls.topic
    if not topic or "." not in topic:
        raise TypeError(f"{cls.__name__} needs a dotted stable topic name")
    if topic in _BY_TOPIC and _BY_TOPIC[topic] is not cls:
        raise TypeError(f"topic {topic!r} is already used by {_BY_TOPIC[topic].__name__}")
    _BY_TOPIC[topic] = cls
    _DECODERS[topic] = msgspec.msgpack.Decoder(cls)
    return cls


def event_type(topic: str) -> type[Event]:
    """Return the event class stored under ``topic``."""
    try:
        return _BY_TOPIC[topic]
    except KeyError:
        raise LookupError(f"unknown event topic {topic!r}") from None


def all_topics() -> list[str]:
    """Every registered topic, sorted."""
    return sorted(_BY_TOPIC)


def encode(event: Event) -> bytes:
    """Encode an event's fields as msgpack (the topic is stored beside it, not inside)."""
    return _ENCODER.encode(event)


def decode(topic: str, data: bytes) -> Event:
    """Decode a stored payload (msgpack, compressed or not) into ``topic``'s event type."""
    try:
        decoder = _DECODERS[topic]
    except KeyError:
        raise LookupError(f"unknown event topic {topic!r}") from None
    result: Event = decoder.decode(unpack(data))
    return result


def to_builtins(event: Event) -> dict[str, Any]:
    """A JSON-ready dict of the event's fields plus its topic."""
    data: dict[str, Any] = msgspec.to_builtins(event)
    data["type"] = event.topic
    return data
