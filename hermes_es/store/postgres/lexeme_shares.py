"""How many rows of ``messages_fts`` a search matches, from the planner's own statistics.

``ANALYZE`` keeps, for a ``tsvector`` column, its most common lexemes (words and pair
lexemes alike) with the share of rows holding each, and the smallest such share
(``pg_stats.most_common_elems`` / ``most_common_elem_freqs``). ``newest_matches`` sizes the id
range it reads from these shares: a term's share is its lexeme's (a lexeme not in the list is
in fewer rows than the smallest listed share, and counts as that share), a prefix's is the sum
of the listed lexemes it covers (at least the smallest share; a prefix answered by a prefix
lexeme, ``tokens.prefix_lexeme``, that lexeme's share), a term of several tokens is in
no more rows than its rarest pair (or, without indexable pairs, its rarest token), and the
terms of a query are taken as independent (their shares multiplied), as the planner does.

The statistics are read once per connection and again after ``REFRESH_S`` seconds.
"""

from __future__ import annotations

import contextlib
import itertools
import time
import weakref
from collections.abc import Sequence
from typing import Any

from hermes_es.store.postgres.tokens import PAIR, Term, pair_lexeme, prefix_lexeme

REFRESH_S = 300.0
"""Seconds the statistics read are used before being read again."""

_STATS = (
    "SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats"
    " WHERE schemaname = current_schema() AND tablename = 'messages_fts' AND attname = 'tsv'"
)


class LexemeShares:
    """Share of rows holding each common lexeme, and the smallest listed share."""

    def __init__(self, shares: dict[str, float], least: float) -> None:
        self.shares = shares
        self.least = least

    @classmethod
    def of_rows(cls, elems: list[str] | None, freqs: list[float] | None) -> LexemeShares | None:
        """From ``pg_stats``' columns (None: no statistics yet)."""
        if not elems or not freqs or len(freqs) < len(elems) + 2:
            return None
        shares = {e: float(f) for e, f in zip(elems, freqs, strict=False)}
        return cls(shares, float(freqs[len(elems)]))

    def lexeme(self, lexeme: str, prefix: bool = False) -> float:
        """Share of rows holding ``lexeme`` (with ``prefix``: a lexeme starting with it)."""
        if not prefix:
            return self.shares.get(lexeme, self.least)
        covered = sum(
            share
            for word, share in self.shares.items()
            if word.startswith(lexeme) and (lexeme[:1] == PAIR or word[:1] != PAIR)
        )
        return min(1.0, max(covered, self.least))

    def term(self, term: Term) -> float:
        """Share of rows matching one term (an upper bound for a term of several tokens)."""
        words, prefix = term
        if len(words) == 1:
            lexeme = prefix_lexeme(words[0]) if prefix else None
            return self.lexeme(words[0], prefix) if lexeme is None else self.lexeme(lexeme)
        last = len(words) - 2
        pairs = [
            self.lexeme(p, prefix and i == last)
            for i, (a, b) in enumerate(itertools.pairwise(words))
            if (p := pair_lexeme(a, b)) is not None
        ]
        if pairs:
            return min(pairs)
        return min(self.lexeme(w, prefix and i == len(words) - 1) for i, w in enumerate(words))

    def query(self, terms: Sequence[Term]) -> float:
        """Share of rows matching every one of ``terms`` (``tokens.search_terms``)."""
        share = 1.0
        for term in terms:
            share *= self.term(term)
        return share


_cache: weakref.WeakKeyDictionary[Any, tuple[float, LexemeShares | None]] = (
    weakref.WeakKeyDictionary()
)


def lexeme_shares(conn: Any) -> LexemeShares | None:
    """The statistics of ``messages_fts.tsv`` as ``conn`` last read them (None: not analyzed)."""
    now = time.monotonic()
    try:
        cached = _cache.get(conn)
    except TypeError:  # not weakly referenceable: read every time
        cached = None
    if cached is not None and now - cached[0] < REFRESH_S:
        return cached[1]
    row = conn.execute_pg(_STATS, prepare=False).fetchone()
    shares = LexemeShares.of_rows(row[0], row[1]) if row is not None else None
    with contextlib.suppress(TypeError):
        _cache[conn] = (now, shares)
    return shares
