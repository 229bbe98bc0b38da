"""The ``hermes`` tokenizer as a plain Python function, one per connection, for the read side.

Calling the tokenizer through FTS5 (``conn.fts5_tokenizer("hermes", [])``) goes C → Python →
C and back for every token: about 80 µs for a 270-byte message, where the same tokens straight
from ``make_tokenizer`` over ``unicode61`` cost about 8 µs. Snippets tokenize every hit's text,
so search calls the function directly. The tokens are the ones the index holds (the same
wrapped ``unicode61`` with the same arguments), so highlighting still marks what matched.
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

from hermes_es.projections.fts import BASE_ARGS, BASE_TOKENIZER, Tokenizer, make_tokenizer

_BY_CONNECTION: WeakKeyDictionary[Any, Tokenizer] = WeakKeyDictionary()


def text_tokenizer(conn: Any) -> Tokenizer:
    """The ``hermes`` tokenizer of ``conn`` as a Python function (made once per connection).

    ``conn`` is an APSW connection or anything with its ``fts5_tokenizer`` (the PostgreSQL
    backend's connection lends one from an in-memory SQLite connection).
    """
    try:
        return _BY_CONNECTION[conn]
    except KeyError:
        pass
    except TypeError:  # not weakly referenceable: make one each time
        return make_tokenizer(conn.fts5_tokenizer(BASE_TOKENIZER, list(BASE_ARGS)))
    tokenizer = make_tokenizer(conn.fts5_tokenizer(BASE_TOKENIZER, list(BASE_ARGS)))
    _BY_CONNECTION[conn] = tokenizer
    return tokenizer
