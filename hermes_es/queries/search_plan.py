"""Which bounded-search candidates FTS5's own ``bm25()`` can score, instead of Python.

The window plan (``queries/bm25.py``) scores each candidate in Python from per-row term counts
that an auxiliary function returns: about 2.5 µs a row, 5 ms for a full window of 2,000. FTS5's
``bm25()`` scores a row in C for about 1 µs, but first counts every match of each term (its
idf) whatever the LIMIT, which is why the window plan exists. Where that count is small and the
window plan's statistics would be exact anyway, both give the same scores, so FTS5 ranks:

* a query of several terms, none a prefix, whose matches fit the window (at most
  ``window``): every match is a candidate and every idf is exact in both plans;
* a one-word query (one token, no prefix) with fewer than ``COUNT_CAP`` matches: the window
  plan counts such a term exactly for its idf, so ``bm25()`` over the newest ``window``
  matches gives the same scores for the same candidates.

Anything else keeps the window plan: prefix terms, frequent words (which then reuse the count
made here), one phrase or identifier (counting a phrase's matches first cost more than it saved:
most identifiers are rare, and the window plan ranks a rare phrase in one pass), and several
terms with many matches.
"""

from __future__ import annotations

from collections.abc import Sequence

import apsw

from hermes_es.queries import bm25
from hermes_es.queries.fts_query import Term
from hermes_es.queries.tokens import text_tokenizer

_COUNT = (
    "SELECT count(*), min(rowid) FROM (SELECT rowid FROM messages_fts"
    " WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?)"
)
_ALL = "SELECT bm25(messages_fts), rowid FROM messages_fts WHERE messages_fts MATCH ?"
_NEWEST = _ALL + " ORDER BY rowid DESC LIMIT ?"


class ExactPool:
    """What ``exact_pool`` found: scored candidates, or the count it made (or neither)."""

    def __init__(
        self,
        pool: list[tuple[float, int]] | None,
        complete: bool,
        counted: tuple[int, int] | None = None,
    ) -> None:
        self.pool = pool
        """(bm25, rowid), best first; None: the window plan must score."""
        self.complete = complete
        """The pool holds every match (no older page can add hits)."""
        self.counted = counted
        """(matches up to ``COUNT_CAP``, oldest row id among them) of a one-word query."""


def _one_token(conn: apsw.Connection, term: Term) -> bool:
    tokens = text_tokenizer(conn)(term.text.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None)
    return len(tokens) == 1


def exact_pool(conn: apsw.Connection, terms: Sequence[Term], match: str, window: int) -> ExactPool:
    """FTS5-scored candidates for ``match`` where they equal the window plan's (see above)."""
    if not terms or any(t.prefix for t in terms):
        return ExactPool(None, False)
    cap = bm25.COUNT_CAP
    if len(terms) == 1 and _one_token(conn, terms[0]) and cap > window:
        found, oldest = conn.execute(_COUNT, (match, cap)).fetchone()
        if found < cap:
            if found <= window:
                return ExactPool(sorted(conn.execute(_ALL, (match,)).fetchall()), True)
            newest = conn.execute(_NEWEST, (match, window)).fetchall()
            return ExactPool(sorted(newest), False)
        return ExactPool(None, False, (int(found), int(oldest)))
    if len(terms) == 1:  # a phrase: counting its matches costs as much as the window plan
        return ExactPool(None, False)
    found, _ = conn.execute(_COUNT, (match, window + 1)).fetchone()
    if found <= window:
        return ExactPool(sorted(conn.execute(_ALL, (match,)).fetchall()), True)
    return ExactPool(None, False)
