"""Turning a stored event row back into an event: the one place a bad row is diagnosed.

Every reader of the log (replay, rebuild, verify, history, ``show --as-of``, doctor) decodes
rows through ``decode_row``. A row that cannot be decoded (damaged bytes, a topic no version of
hermes knows, fields of the wrong type) raises ``CorruptEventError`` naming the log position,
the stream and its version, instead of a library exception with a traceback. Whatever the
stored bytes look like (plain msgpack today, compressed later), the translation stays here.
"""

from __future__ import annotations

import msgspec

from hermes_es import events as ev
from hermes_es.errors import StoreError

CORRUPT_FIX = (
    "the event log is the source of truth and cannot be rebuilt from itself: stop every hermes "
    "process, keep a copy of state.db, and restore it from a backup"
)


class CorruptEventError(StoreError):
    """A stored event row cannot be decoded into an event."""

    def __init__(
        self, *, position: int | None, stream: str, version: int, topic: str, reason: str
    ) -> None:
        where = f"event {position}" if position is not None else "an event"
        super().__init__(
            f"{where} (version {version} of stream {stream!r}, topic {topic!r}) cannot be "
            f"decoded: {reason}; {CORRUPT_FIX}",
            subject=stream,
        )
        self.position = position
        self.stream = stream
        self.version = version
        self.topic = topic
        self.reason = reason


def decode_row(
    topic: object, state: object, *, stream: object, version: object, position: object = None
) -> ev.Event:
    """Decode one stored event; a row that does not decode raises ``CorruptEventError``."""
    try:
        if not isinstance(topic, str):
            raise TypeError(f"topic is {type(topic).__name__}, not text")
        if not isinstance(state, bytes | bytearray | memoryview):
            raise TypeError(f"payload is {type(state).__name__}, not bytes")
        return ev.decode(topic, bytes(state))
    except (msgspec.DecodeError, LookupError, TypeError, ValueError) as exc:
        raise CorruptEventError(
            position=int(position) if isinstance(position, int) else None,
            stream=str(stream),
            version=int(version) if isinstance(version, int) else 0,
            topic=str(topic),
            reason=str(exc) or type(exc).__name__,
        ) from exc
