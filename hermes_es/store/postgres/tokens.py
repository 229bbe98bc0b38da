"""The ``hermes`` tokenizer outside SQLite, so PostgreSQL search splits text exactly as FTS5 does.

Search must find the same messages on both backends. Rather than approximate SQLite's
``unicode61`` rules (case folding, diacritics removal, which characters are token characters)
with PostgreSQL's parser, the PostgreSQL backend runs the very same tokenizer: APSW exposes
FTS5 tokenizers as callables, and this module keeps one per thread on a database-less APSW
connection (``:memory:``, used only to host the tokenizer; it never stores anything).

Tokens become a ``tsvector`` literal with positions (so phrases match as adjacent lexemes, like
FTS5 phrases) and query terms become ``tsquery`` phrases (``a <-> b``, ``:*`` for a prefix).
"""

from __future__ import annotations

import threading

import apsw

from hermes_es.projections.fts import (
    BASE_ARGS,
    BASE_TOKENIZER,
    make_tokenizer,
    register_tokenizer,
)
from hermes_es.queries.fts_query import parse_terms

MAX_POSITION = 16383
"""PostgreSQL's largest tsvector position; later tokens share it (see docs/postgres.md)."""

_local = threading.local()


def host() -> apsw.Connection:
    """This thread's tokenizer host (an APSW connection with the ``hermes`` tokenizer)."""
    conn: apsw.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = apsw.Connection(":memory:")
        register_tokenizer(conn)
        _local.conn = conn
        # The ``hermes`` tokenizer's own function over ``unicode61``, called directly: the
        # same tokens as through FTS5 (which would call back into it), at half the cost.
        _local.tokenizer = make_tokenizer(conn.fts5_tokenizer(BASE_TOKENIZER, list(BASE_ARGS)))
    return conn


def tokens(text: str, *, query: bool = False) -> list[str]:
    """The tokens of ``text`` as the FTS5 index (or, with ``query``, a MATCH) sees them."""
    host()
    flags = apsw.FTS5_TOKENIZE_QUERY if query else apsw.FTS5_TOKENIZE_DOCUMENT
    return [str(t[2]) for t in _local.tokenizer(text.encode("utf-8"), flags, None)]


def _quote(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


_POSITIONS = [str(i) for i in range(MAX_POSITION + 1)]


def tsvector_literal(text: str) -> str:
    """The text's tokens with their positions, as a ``tsvector`` input string."""
    positions: dict[str, list[str]] = {}
    get = positions.get
    host()
    found = _local.tokenizer(text.encode("utf-8"), apsw.FTS5_TOKENIZE_DOCUMENT, None)
    for i, (_, _, token) in enumerate(found, start=1):
        seen = get(token)
        where = _POSITIONS[i] if i < MAX_POSITION else _POSITIONS[MAX_POSITION]
        if seen is None:
            positions[token] = [where]
        elif len(seen) < 256:
            seen.append(where)
    if "'" in text or "\\" in text:  # only then can a token need escaping
        return " ".join(_quote(t) + ":" + ",".join(p) for t, p in positions.items())
    return " ".join("'" + t + "':" + ",".join(p) for t, p in positions.items())


def tsquery_text(user_query: str) -> str | None:
    """A ``tsquery`` ANDing every term as a phrase, or None when nothing is searchable."""
    parts: list[str] = []
    for term in parse_terms(user_query):
        words = tokens(term.text, query=True)
        if not words:
            continue
        quoted = [_quote(w) for w in words]
        if term.prefix:
            quoted[-1] += ":*"
        parts.append("(" + " <-> ".join(quoted) + ")" if len(quoted) > 1 else quoted[0])
    return " & ".join(parts) if parts else None
