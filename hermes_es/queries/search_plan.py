"""Which bounded-search candidates FTS5's own ``bm25()`` can score, instead of Python.

The window plan (``queries/bm25.py``) scores each candidate in Python from per-row term counts
that an auxiliary function returns: about 2.5 µs a row, 5 ms for a full window of 2,000. FTS5's
``bm25()`` scores a row in C for about 1 µs, but first counts every match of each term (its
idf) whatever the LIMIT, which is why the window plan exists. Where that count is small and the
window plan's statistics would be exact anyway, both give the same scores, so FTS5 ranks:

* a query of several terms, none a prefix, whose matches fit the window (at most
  ``window``): every match is a candidate and every idf is exact. On an index of more than
  ``FULL_COUNT_CAP`` rows only if, besides, its terms have at most about ``FULL_COUNT_CAP``
  matches together (``bm25()`` counts each term's matches in full, which for ``the`` at
  5,000,000 messages would take longer than the window plan) and one of them has fewer than
  ``SAMPLE`` (so the intersection's walk seeks at most that many rows:
  ``queries/term_sample.py``);
* a one-word query (one token, no prefix) with fewer than ``COUNT_CAP`` matches: the window
  plan counts such a term exactly for its idf, so ``bm25()`` over the newest ``window``
  matches gives the same scores for the same candidates. With the compiled scorer, a word at
  the cap too: the statement estimates its rows as the window plan does and hands them to
  ``hermes_bm25`` (``queries/search.py``, ``_ESTIMATED``).

The count and the ranking are one statement (``FusedPlan``, ``queries/search.py``): its first
part walks the newest matches up to the cap, and FTS5 ranks only when the count passes the gate
(otherwise the ranking part is handed a lower row-id bound no row meets, so its backwards walk
ends at its first row and ``bm25()`` never counts the term in full; an upper bound would walk
the whole doclist backwards to reach it).

Anything else keeps the window plan: prefix terms (identifiers among them,
``queries/identifiers.py``), frequent words (which then reuse the count
made here), one phrase or identifier (``bm25()`` counts a phrase's matches by checking the
positions of every row holding its tokens: slower than the window plan's pass), and several
terms with many matches together or (on a big index) many each.
"""

from __future__ import annotations

from collections.abc import Sequence

import apsw

from hermes_es.queries import bm25
from hermes_es.queries.fts_query import Term
from hermes_es.queries.term_sample import TermSamples, indexed_rows, sample_terms
from hermes_es.queries.tokens import text_tokenizer

__all__ = ["FULL_COUNT_CAP", "SAMPLE", "ExactPool", "exact_pool", "indexed_rows", "window_samples"]

_COUNT = (
    "SELECT count(*), min(rowid) FROM (SELECT rowid FROM messages_fts"
    " WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT {limit})"
)
_NEWEST = (
    "SELECT bm25(messages_fts) AS b, rowid FROM messages_fts WHERE messages_fts MATCH ?"
    " ORDER BY rowid DESC LIMIT {limit}"
)
"""(The LIMITs are literals: a statement with a bound LIMIT is prepared again at every run.)"""


FULL_COUNT_CAP = 200_000
"""Most matches the terms of a several-term query may have together (estimated) for FTS5's
``bm25()`` to rank it: ``bm25()`` counts every match of every term first (~45-80 ns a match,
9-16 ms for 200,000), and ``the`` has millions at 5,000,000 messages; beyond, the window plan
ranks. Indexes of at most this many rows are never sampled (no sum can pass it)."""
SAMPLE = 2000
"""Newest matches of each term of a several-term query read on a bigger index: its count
estimate, and the bound of the intersection's walk (``queries/term_sample.py``)."""


class ExactPool:
    """What ``exact_pool`` found: the statement of FTS5-scored candidates, or the count it made
    (or neither)."""

    def __init__(
        self,
        conn: apsw.Connection,
        source: tuple[str, tuple[object, ...]] | None,
        complete: bool,
        *,
        size: int = 0,
        counted: tuple[int, int] | None = None,
        top: int | None = None,
        samples: TermSamples | None = None,
    ) -> None:
        self.conn = conn
        self.source = source
        """A statement yielding (bm25 ``b``, ``rowid``) of every candidate, and its arguments;
        None: the window plan must score."""
        self.size = size
        """How many candidates ``source`` yields."""
        self.top = top
        self.complete = complete
        """The candidates are every match (no older page can add hits)."""
        self.truncated = top is not None and source is not None and size >= top
        """``pool`` keeps only the best ``top`` candidates: there may be more."""
        self.counted = counted
        """(matches up to ``COUNT_CAP``, oldest row id among them) of a one-word query."""
        self.samples = samples
        """Each term's newest matches, for the window plan (``queries/term_sample.py``)."""

    @property
    def pool(self) -> list[tuple[float, int]] | None:
        """(bm25, rowid) of the candidates best first (the best ``top`` of them), read now."""
        if self.source is None:
            return None
        return _best(self.conn, self.source[0], self.source[1], self.top)


def _one_token(conn: apsw.Connection, term: Term) -> bool:
    tokens = text_tokenizer(conn)(term.text.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None)
    return len(tokens) == 1


def _best(
    conn: apsw.Connection, sql: str, args: tuple[object, ...], top: int | None
) -> list[tuple[float, int]]:
    """(bm25, rowid) of ``sql``'s rows best first; with ``top``, only that many (sorted in C)."""
    if top is None:
        return sorted(conn.execute(sql, args).fetchall())
    ranked = f"SELECT b, rowid FROM ({sql}) ORDER BY b, rowid LIMIT {int(top)}"
    rows: list[tuple[float, int]] = conn.execute(ranked, args).fetchall()
    return rows


class FusedPlan:
    """How one statement counts a query's newest matches and, when their statistics are exact,
    ranks them with FTS5's ``bm25()`` (``queries/search.py``, ``fused_hits``)."""

    def __init__(
        self,
        count_cap: int,
        gate: int,
        window: int,
        one_word: bool,
        samples: TermSamples | None,
        words: list[str] | None = None,
        match: str | None = None,
        phrases: int = 1,
    ) -> None:
        self.count_cap = count_cap
        """The newest matches counted (a capped doclist walk)."""
        self.gate = gate
        """Most matches (of the ``count_cap`` counted) for ``bm25()`` to rank."""
        self.window = window
        self.one_word = one_word
        """A one-word query: a count that fails the gate is handed to the window plan."""
        self.samples = samples
        self.words = words
        """A several-term query whose terms are one word each: those words as the index holds
        them, in query order (their rows are counted from the vocabulary for the idf; None:
        bm25's own walk of each term's matches)."""
        self.match = match
        """The FTS5 expression to match instead of the query's own (a one-term prefix query:
        the window plan's, a short prefix expanded; None: the query's)."""
        self.phrases = phrases
        """Phrases of a one-term query's expression: more than one, the term is scored as one
        (``bm25.scorer(term=True)``)."""


def _words(conn: apsw.Connection, terms: Sequence[Term]) -> list[str] | None:
    """Each term's one token (None: some term is several tokens, a phrase)."""
    tokenize = text_tokenizer(conn)
    words: list[str] = []
    for term in terms:
        tokens = tokenize(term.text.encode("utf-8"), apsw.FTS5_TOKENIZE_QUERY, None)
        if len(tokens) != 1:
            return None
        words.append(tokens[0][2])
    return words


def fused_plan(
    conn: apsw.Connection, terms: Sequence[Term], window: int
) -> tuple[FusedPlan | None, TermSamples | None]:
    """The fused statement's counts for ``terms`` (None: the window plan must score), and the
    terms' samples on a big index (``queries/term_sample.py``)."""
    cap = bm25.COUNT_CAP
    if len(terms) == 1 and terms[0].prefix and not terms[0].identifier:
        return _prefix_plan(conn, terms[0], window), None
    if not terms or any(t.prefix for t in terms):  # identifiers too: bm25() of a prefix
        return None, None  # term runs the prefix look-up again per count (~3x a rare one's)
    if len(terms) == 1 and _one_token(conn, terms[0]) and cap > window:
        return FusedPlan(cap, cap - 1, window, True, None), None
    if len(terms) == 1:  # a phrase: bm25()'s count of its matches costs more than it saves
        return None, window_samples(conn, terms)
    samples = window_samples(conn, terms)
    if samples is not None and (
        sum(samples.estimates) > FULL_COUNT_CAP or samples.floor is not None
    ):  # bm25() would count too many matches, or the walk would seek too many rows
        return None, samples
    return FusedPlan(window + 1, window, window, False, samples, _words(conn, terms)), samples


def _prefix_plan(conn: apsw.Connection, term: Term, window: int) -> FusedPlan | None:
    """A one-term prefix query ranked in the fused statement as a one-word query is: counted
    up to ``COUNT_CAP`` through the window plan's expression (a short prefix expanded into the
    indexed prefixes, ``bm25._plan_terms``), its rows estimated as the window plan estimates
    them, scored by the compiled build (FTS5's ``bm25()`` would count the prefix's matches in
    full). None without the compiled scorer, for a prefix of several tokens (``src/ma*``) or
    for one expanded into more phrases than the window plan counts (``t*``)."""
    if not bm25.compiled_scorer(conn):
        return None
    match, phrases, single_token = bm25.planned_term(conn, term)
    if not single_token or phrases > bm25.COUNTED_PHRASES or window >= bm25.COUNT_CAP:
        return None
    cap = bm25.COUNT_CAP
    return FusedPlan(cap, cap - 1, window, True, None, match=match, phrases=phrases)


def exact_pool(
    conn: apsw.Connection,
    terms: Sequence[Term],
    match: str,
    window: int,
    top: int | None = None,
) -> ExactPool:
    """FTS5-scored candidates for ``match`` where they equal the window plan's (see above):
    the count ``fused_plan`` describes, made on its own (the search makes it inside its one
    statement). ``ExactPool.pool`` reads the candidates (with ``top``, only the best ``top``,
    sorted by SQLite; ``ExactPool.truncated`` says when there may be more).
    """
    plan, samples = fused_plan(conn, terms, window)
    if plan is None or plan.match is not None:  # a prefix: bm25() would count it in full
        return ExactPool(conn, None, False, samples=samples)
    found, oldest = conn.execute(_COUNT.format(limit=int(plan.count_cap)), (match,)).fetchone()
    if found > plan.gate:
        counted = (int(found), int(oldest)) if plan.one_word else None
        return ExactPool(conn, None, False, counted=counted, samples=samples)
    size = min(int(found), window)
    source = (_NEWEST.format(limit=int(window)), (match,))
    return ExactPool(conn, source, found <= window, size=size, top=top)


def window_samples(conn: apsw.Connection, terms: Sequence[Term]) -> TermSamples | None:
    """Each term's newest ``SAMPLE`` matches on an index of more than ``FULL_COUNT_CAP`` rows
    (``queries/term_sample.py``); for one phrase, each of its words' (its matches are among
    theirs: the floor bounds its walk the same way). None for one word, a prefix term or a
    smaller index."""
    if any(t.prefix for t in terms):
        return None
    if len(terms) == 1:
        text = terms[0].text.encode("utf-8")
        words = [t[2] for t in text_tokenizer(conn)(text, apsw.FTS5_TOKENIZE_QUERY, None)]
        exprs = ['"' + w.replace('"', '""') + '"' for w in dict.fromkeys(words)]
        return sample_terms(conn, exprs, SAMPLE, FULL_COUNT_CAP)
    return sample_terms(conn, [t.to_fts() for t in terms], SAMPLE, FULL_COUNT_CAP)
