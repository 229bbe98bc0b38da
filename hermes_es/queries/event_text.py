"""A search hit's text read from its event in C, the ``messages`` view's ``content`` otherwise.

The view computes ``content`` with ``hermes_message_text`` (``hermes_es.store.message_text``,
Python: ~6 µs to unpack and decode a chat message, ~14 µs a row through SQL). The compiled
build's ``hermes_event_text`` (``projections/_hermes_text.c``) does the same in C, and returns
NULL wherever it is not sure to give that function's value (a shape it does not take, a payload
it cannot unpack, no libzstd on the system), so ``text_sql`` asks the view then: the same text
either way (``tests/queries/test_event_text.py`` compares both on real stores and on arbitrary
payloads).
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

import apsw

from hermes_es.projections.base import MESSAGE_ID_SHIFT

FUNCTION = "hermes_event_text"
DICTIONARY_FUNCTION = "hermes_text_dictionary"
_ZSTD_DICT_MAGIC = b"\x37\xa4\x30\xec"
"""How a full zstd dictionary starts (libzstd takes any other as raw content)."""

_COMPILED: WeakKeyDictionary[apsw.Connection, bool] = WeakKeyDictionary()
_KEYS: list[str] = []


def message_keys() -> dict[str, str]:
    """Per topic of an event that stores messages, the payload field holding them:
    ``message`` (one) or a list's name (``hermes_es.store.message_text``'s shapes)."""
    from hermes_es import events as ev

    return {
        ev.MessageAppended.topic: "message",
        ev.MessageEdited.topic: "message",
        ev.TurnAppended.topic: "messages",
        ev.HistoryImported.topic: "messages",
        ev.CompactedInPlace.topic: "summary",
    }


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _key_case() -> str:
    if not _KEYS:
        whens = " ".join(f"WHEN {_quoted(t)} THEN {_quoted(k)}" for t, k in message_keys().items())
        _KEYS.append(f"CASE e.topic {whens} END")
    return _KEYS[0]


def compiled_text(conn: apsw.Connection) -> bool:
    """Whether ``conn`` reads hit texts in C: it has the compiled build's functions and the
    system's libzstd, and knows every dictionary (made known on first use)."""
    if not isinstance(conn, apsw.Connection):
        return False
    try:
        return _COMPILED[conn]
    except KeyError:
        pass
    from hermes_es.store.zdict import DICTIONARIES, FULL

    found = True
    try:
        for dict_id, raw in DICTIONARIES.items():
            if (dict_id in FULL) != raw.startswith(_ZSTD_DICT_MAGIC):
                continue  # libzstd would take it as the other kind: leave its frames to Python
            (made,) = conn.execute(f"SELECT {DICTIONARY_FUNCTION}(?, ?)", (dict_id, raw)).fetchone()
            found = found and bool(made)
    except apsw.SQLError:  # the Python tokenizer (no compiled functions)
        found = False
    _COMPILED[conn] = found
    return found


def text_sql(conn: apsw.Connection, message_id: str, content: str | None = None) -> str:
    """The SQL expression of the text of the message whose id is ``message_id`` (an SQL
    expression): ``hermes_event_text`` of its event, else the view's ``content`` (``content``:
    the statement's own column of it, if it has one)."""
    view = content or f"(SELECT content FROM messages WHERE id = {message_id})"
    if not compiled_text(conn):
        return view
    event = (
        f"(SELECT {FUNCTION}(e.state, {message_id} % {MESSAGE_ID_SHIFT}, {_key_case()})"
        f" FROM events e WHERE e.id = {message_id} / {MESSAGE_ID_SHIFT})"
    )
    return f"coalesce({event}, {view})"
