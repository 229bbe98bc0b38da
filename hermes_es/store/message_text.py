"""``hermes_message_text``: a message's text read from the event that stored it.

The projections keep no copy of message text: the ``messages`` view computes its ``content``
column with this SQL function from the stored event (``events.state``: compressed msgpack, see
``hermes_es.store.codec``), and the full-text index reads the same view. Every connection the
store opens registers it (``hermes_es.store.db``); a plain ``sqlite3`` shell has no such
function, so reading ``messages.content`` there fails with ``no such function`` (docs/schema.md
says how to read text without hermes).

``hermes_message_text(event_id, stream, version, topic, state, index)`` returns the plain
text (structured content: the text parts joined by newlines) of the ``index``-th message the
event stores, or NULL when the event stores no such message; an event that does not decode
raises ``CorruptEventError`` (naming its position, stream and version) out of the statement.
An event that stores many messages (an import, a turn) is decoded once for consecutive calls:
the last few decoded events are kept per connection, each under its id and exact payload
bytes (an id is reused after a rollback, the bytes tell the two events apart).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw
import msgspec

FUNCTION = "hermes_message_text"
"""The SQL name the function is registered under."""

_CACHED_EVENTS = 4
"""Decoded multi-message events kept per connection."""


class _Text(msgspec.Struct):
    """Only the content of a stored message (the other fields are skipped while decoding)."""

    content: str | list[dict[str, Any]] = ""


class _One(msgspec.Struct):
    message: _Text


class _Many(msgspec.Struct):
    messages: list[_Text] = []


class _Summary(msgspec.Struct):
    summary: list[_Text] = []


_SHAPES: dict[str, Callable[[bytes], list[_Text]]] = {}
_UNPACK: list[Callable[[bytes], bytes]] = []
"""``codec.unpack``, imported on first use (zstandard stays out of light CLI start-ups)."""


def _content_text(content: str | list[dict[str, Any]]) -> str:
    """``validation.content_text`` without importing the aggregates at start-up."""
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content if isinstance(p.get("text"), str))


def _shapes() -> dict[str, Callable[[bytes], list[_Text]]]:
    """Per topic of an event that stores messages: its payload decoded to just their texts."""
    if not _SHAPES:
        from hermes_es import events as ev
        from hermes_es.store.codec import unpack

        _UNPACK.append(unpack)

        one, many = msgspec.msgpack.Decoder(_One), msgspec.msgpack.Decoder(_Many)
        summary = msgspec.msgpack.Decoder(_Summary)

        def single(data: bytes) -> list[_Text]:
            return [one.decode(data).message]

        def several(data: bytes) -> list[_Text]:
            return many.decode(data).messages

        def summaries(data: bytes) -> list[_Text]:
            return summary.decode(data).summary

        _SHAPES.update(
            {
                ev.MessageAppended.topic: single,
                ev.MessageEdited.topic: single,
                ev.TurnAppended.topic: several,
                ev.HistoryImported.topic: several,
                ev.CompactedInPlace.topic: summaries,
            }
        )
    return _SHAPES


def _texts(event_id: int, stream: object, version: object, topic: str, state: bytes) -> list[str]:
    """The text of every message the event stores, in order.

    Only the message contents are decoded; a payload that does not decode that way is decoded
    in full by ``decode_row``, which names what is wrong (``CorruptEventError``).
    """
    shape = (_SHAPES or _shapes()).get(topic)
    if shape is not None:
        try:
            return [_content_text(m.content) for m in shape(_UNPACK[0](state))]
        except (msgspec.DecodeError, ValueError, TypeError):
            pass
    from hermes_es.aggregates.validation import content_text
    from hermes_es.projections.search import new_messages
    from hermes_es.store.decoding import decode_row

    event = decode_row(topic, state, stream=stream, version=version, position=event_id)
    return [content_text(m.content) for m in new_messages(event)]


def make_function() -> Callable[..., str | None]:
    """A fresh ``hermes_message_text`` with its own small cache (one per connection)."""
    cache: dict[int, tuple[bytes, list[str]]] = {}

    def message_text(
        event_id: object,
        stream: object,
        version: object,
        topic: object,
        state: object,
        index: object,
    ) -> str | None:
        if not isinstance(event_id, int) or not isinstance(index, int):
            return None
        if not isinstance(state, bytes | bytearray | memoryview):
            return None
        payload = bytes(state)
        hit = cache.get(event_id)
        if hit is not None and hit[0] == payload:
            texts = hit[1]
        else:
            texts = _texts(event_id, stream, version, str(topic), payload)
            if len(texts) > 1:
                if len(cache) >= _CACHED_EVENTS:
                    cache.pop(next(iter(cache)))
                cache[event_id] = (payload, texts)
        return texts[index] if 0 <= index < len(texts) else None

    return message_text


def register_message_text(conn: apsw.Connection) -> None:
    """Register ``hermes_message_text`` on ``conn`` (the ``messages`` view needs it)."""
    conn.create_scalar_function(FUNCTION, make_function(), 6, deterministic=True)
