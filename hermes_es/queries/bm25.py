"""bm25 for the bounded search window, without FTS5 scanning every match of every term.

FTS5's own ``bm25()`` first counts every row that matches each term (its idf), a full
scan of the term's matches (~45 ms for ``the`` on 1,000,000 messages, more for a phrase of
common words or a short prefix). So the pass instead returns, per row, its length and each
term's count (``_Frequencies``, an auxiliary function), and the same bm25 formula (k1 1.2,
b 0.75) is applied here. A term's match count is exact when it is below the window (then the
scores equal ``bm25()`` to the bit); above it, it is estimated from how many rows the window's
newest ``window`` matches span (``messages_fts_docsize``), which only moves the idf a little
and, for a one-term query, never changes the order. A two-character prefix ``co*`` (the
index keeps three-character prefixes only, ``PREFIX_INDEX``) is matched as ``"co" OR "co0"* OR
… OR "coz"*`` through the three-character prefix index, counted as one term, so it too reads
only the newest rows. A one-character prefix ``t*`` likewise becomes each of its 36 two-character
stems so expanded (1,333 phrases; without that FTS5 merges the doclist of every indexed word
starting with ``t``, in time proportional to the store: 1.2 s at 1,000,000 messages); with that
many phrases its matches are counted only up to the window, as a phrase's are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast
from weakref import WeakKeyDictionary

import apsw
import msgspec

from hermes_es.projections.fts import PREFIX_INDEX
from hermes_es.queries.fts_query import Term, parse_terms
from hermes_es.queries.term_sample import TermSamples, index_totals
from hermes_es.queries.tokens import text_tokenizer

_PREFIX_EXPANSION = "0123456789abcdefghijklmnopqrstuvwxyz"
"""Third characters of the indexed three-character prefixes a two-character prefix becomes."""
_EXPANDED_LENGTH = min(int(n) for n in PREFIX_INDEX.split()) - 1
"""Length of a prefix that is expanded into indexed prefixes one character longer."""
COUNT_CAP = 3_000
"""Up to how many matches a one-word term is counted exactly for its idf (beyond: estimated
from the rows its newest ``COUNT_CAP`` matches span). A one-term query's order does not depend
on its idf (a common factor of every score), only the scores' values do; it was 20,000 until
the count walk (~0.1 µs a match) was most of a frequent word's search."""
COUNTED_PHRASES = 64
"""Most phrases a one-token term may have and still be counted up to ``COUNT_CAP`` (a
two-character prefix's 37; a one-character prefix's 1,333 are counted up to the window)."""
NATIVE_PREFIX_ROWS = 20_000
"""Up to how many indexed rows a one- or two-character prefix is matched by FTS5 itself (it
merges the doclist of every word the prefix starts: ~0.2 µs a match, which on a small index
costs less than the expansion's walk of 37 or 1,333 phrases through every segment; at 10,000
messages ``co*`` 0.8 ms against 2.8; at 100,000 7.5 against 2.8: bench/README.md)."""
SPAN_CAP = 100_000
"""Up to how many rows the span of a term's newest matches is counted exactly."""
BM25_K1 = 1.2
BM25_B = 0.75


class _Term(msgspec.Struct, frozen=True):
    """One query term as FTS5 phrases that together match it (usually one phrase)."""

    phrases: list[str]
    single_token: bool = False
    """Each phrase is one word or prefix: counting its matches reads one doclist each."""

    def expr(self) -> str:
        """The term as an FTS5 expression."""
        if len(self.phrases) == 1:
            return self.phrases[0]
        return "(" + " OR ".join(self.phrases) + ")"


_VOCABULARY: WeakKeyDictionary[apsw.Connection, bool] = WeakKeyDictionary()
VOCABULARY = "temp.messages_fts_vocab"
"""An ``fts5vocab`` table of the index's words (``row``: each word's rows), made per connection."""


def vocabulary(conn: apsw.Connection) -> bool:
    """Whether ``conn`` has ``VOCABULARY`` (made on first use; not under ``PRAGMA query_only``,
    which forbids even a temp table)."""
    try:
        return _VOCABULARY[conn]
    except KeyError:
        pass
    try:
        conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {VOCABULARY}"
            " USING fts5vocab(main, messages_fts, row)"
        )
        found = True
    except apsw.ReadOnlyError:
        found = False
    _VOCABULARY[conn] = found
    return found


def _non_ascii_terms(conn: apsw.Connection, stem: str) -> list[str] | None:
    """Prefixes one character longer than ``stem`` of the indexed words that continue it with
    a non-ASCII character (None: can't tell)."""
    if not vocabulary(conn):
        return None
    rows = conn.execute(
        "SELECT term FROM temp.messages_fts_vocab WHERE term >= ? AND term < ?",
        (stem + "\u0080", stem[:-1] + chr(ord(stem[-1]) + 1)),
    )
    return sorted({str(r[0])[: len(stem) + 1] for r in rows})


def _expansion(conn: apsw.Connection, stem: str) -> list[str] | None:
    """The phrases that match exactly the words starting with ``stem`` (shorter than the
    indexed prefixes): the words of fewer characters than those prefixes as themselves, the
    rest through the prefix index (None: can't tell which non-ASCII words there are)."""
    if len(stem) == _EXPANDED_LENGTH:
        others = _non_ascii_terms(conn, stem)
        if others is None:
            return None
        longer = [stem + c for c in _PREFIX_EXPANSION] + others
        return [f'"{stem}"'] + [f'"{p}"*' for p in longer]
    # A shorter stem: each one-character-longer stem, expanded, and the longer stems that
    # continue it with a non-ASCII character (few: matched by FTS5's merge, as before).
    wide = _non_ascii_terms(conn, stem)
    if wide is None:
        return None
    phrases = [f'"{stem}"'] + [f'"{p}"*' for p in wide]
    for c in _PREFIX_EXPANSION:
        inner = _expansion(conn, stem + c)
        if inner is None:
            return None
        phrases += inner
    return phrases


def _plan_terms(conn: apsw.Connection, terms: Sequence[Term]) -> list[_Term]:
    """The query's terms; a one- or two-letter prefix becomes the words it is or starts
    shorter than three characters, plus its indexed 3-prefixes.

    FTS5 answers ``co*`` by merging the doclist of every word starting with ``co`` (there is
    no two-character prefix index), which ignores LIMIT and rowid bounds. ``"co" OR "coa"* OR
    …`` matches the same rows through the three-character prefix index, newest first; ``t*``
    likewise becomes ``"t" OR "t0" OR … OR "t00"* OR …`` (1,333 phrases).
    """
    tokenizer = text_tokenizer(conn)
    out: list[_Term] = []
    for term in terms:
        tokens = [t[2] for t in tokenizer(term.text.encode(), apsw.FTS5_TOKENIZE_QUERY, None)]
        first = tokens[0] if len(tokens) == 1 else ""
        others = None
        expandable = 0 < len(first) <= _EXPANDED_LENGTH and all(
            c in _PREFIX_EXPANSION for c in first
        )
        if term.prefix and expandable and index_totals(conn)[0] > NATIVE_PREFIX_ROWS:
            others = _expansion(conn, first)
        if others is not None:
            out.append(_Term(others, True))
        else:
            out.append(_Term([term.to_fts()], len(tokens) == 1 or bool(term.identifier)))
    return out


def planned_term(conn: apsw.Connection, term: Term) -> tuple[str, int, bool]:
    """How the window plan matches ``term`` alone: its FTS5 expression, its number of phrases
    (a short prefix's expansion has many), and whether each phrase is one token."""
    planned = _plan_terms(conn, [term])[0]
    return planned.expr(), len(planned.phrases), planned.single_token


class _Frequencies:
    """FTS5 auxiliary function: a row's length in tokens and how often each term occurs in it.

    Returns ``length << 32 | count`` for a one-term query, ``-(length << 32 | count << 16 |
    count) - 1`` for two terms that occur at most 65535 times, else ``"length count …"``;
    keeps the index's row count and token total (bm25's N and average length). The compiled
    build's ``hermes_term_counts`` (``_CompiledFrequencies``) returns the same values in C."""

    def __init__(self) -> None:
        self.sizes: list[int] = [1]
        self.single_phrases = True
        self.rows = 0
        self.tokens = 0

    def call(self, sizes: list[int]) -> tuple[str, list[object]]:
        """The SQL call for a statement whose terms have ``sizes`` phrases each, and its
        arguments (the statistics are read again from the statement's first row)."""
        self.sizes = sizes
        self.single_phrases = all(size == 1 for size in sizes)
        self.rows = 0
        self.tokens = 0
        return "hermes_frequencies(messages_fts)", []

    def totals(self, conn: apsw.Connection) -> tuple[int, int]:
        """(rows, tokens) of the index, as the last statement's first row saw them."""
        return self.rows, self.tokens

    def __call__(self, api: apsw.FTS5ExtensionApi) -> int | str:
        if not self.rows:
            self.rows = api.row_count
            self.tokens = api.column_total_size(0)
        length = int(api.column_size(0))
        if len(self.sizes) == 1:
            return (length << 32) | int(api.inst_count)
        if self.single_phrases:
            counts = [len(api.phrase_locations(i)[0]) for i in range(len(self.sizes))]
        else:
            counts = []
            phrase = 0
            for size in self.sizes:
                counts.append(
                    sum(len(api.phrase_locations(i)[0]) for i in range(phrase, phrase + size))
                )
                phrase += size
        if len(counts) == 2 and length < 1 << 31 and max(counts) <= 0xFFFF:
            return -((length << 32) | (counts[0] << 16) | counts[1]) - 1
        return " ".join(map(str, [length, *counts]))


_SIZE = "(SELECT sz FROM messages_fts_docsize WHERE id = messages_fts.rowid)"
"""The row's ``messages_fts_docsize`` blob, handed to the compiled functions: read by the
statement's own cursor it costs about a fifth of FTS5's per-row look-up (``xColumnSize``)."""


class _CompiledFrequencies:
    """``_Frequencies``' values from the compiled build's ``hermes_sized_counts``
    (``projections/_hermes_fts5.c``; ``hermes_term_counts`` with the row's length read from
    its docsize blob): no Python runs per row (~5 µs a row in Python, the window's main cost).
    The index's row count and token total come from FTS5's averages record, the numbers
    ``bm25()`` reads."""

    def call(self, sizes: list[int]) -> tuple[str, list[object]]:
        """The SQL call for terms of ``sizes`` phrases each, and its arguments."""
        return f"hermes_sized_counts(messages_fts, {_SIZE}" + ", ?" * len(sizes) + ")", list(sizes)

    def totals(self, conn: apsw.Connection) -> tuple[int, int]:
        """(rows, tokens) of the index, from its averages record."""
        return index_totals(conn)


_REGISTERED: WeakKeyDictionary[apsw.Connection, _Frequencies | _CompiledFrequencies] = (
    WeakKeyDictionary()
)


def _frequencies(conn: apsw.Connection) -> _Frequencies | _CompiledFrequencies:
    """The connection's frequencies function: the compiled one when the connection has it
    (the compiled tokenizer loaded), else ``hermes_frequencies`` registered once (FTS5 keeps
    every registration until the connection closes, so one per search would grow without
    bound)."""
    try:
        return _REGISTERED[conn]
    except KeyError:
        pass
    freq: _Frequencies | _CompiledFrequencies
    try:
        conn.execute(f"SELECT hermes_sized_counts(messages_fts, {_SIZE}) FROM messages_fts WHERE 0")
        freq = _CompiledFrequencies()
    except apsw.SQLError:  # the Python tokenizer (or a build without the function)
        freq = _Frequencies()
        conn.register_fts5_function("hermes_frequencies", freq)
    _REGISTERED[conn] = freq
    return freq


def compiled_scorer(conn: apsw.Connection) -> bool:
    """Whether ``conn`` scores with the compiled build's ``hermes_bm25`` (``scorer``)."""
    return isinstance(_frequencies(conn), _CompiledFrequencies)


SIZE_JOIN = " LEFT JOIN messages_fts_docsize AS sized ON sized.id = messages_fts.rowid"
"""The join ``scorer(..., joined=True)`` reads each row's docsize blob through: the blob as a
column of the statement's loop, where the correlated subquery (``_SIZE``) runs a subprogram for
every row (~0.1 µs a row less: ~0.2 ms of a frequent word's 2,000-row window). A LEFT JOIN, so
a row without a docsize entry is still scored (its length then read by FTS5, as before)."""


def scorer(
    conn: apsw.Connection, rows: Sequence[str] = (), *, joined: bool = False, term: bool = False
) -> str:
    """The SQL of a row's bm25 score: the compiled build's ``hermes_bm25`` (FTS5's ``bm25()``
    to the bit, the row's length read by the statement's own docsize cursor, ~0.3 µs a row
    where FTS5's look-up costs ~0.55; ``rows``: an SQL expression per phrase of its matching
    rows, counted cheaper than ``bm25()``'s walk of each phrase's matches), else
    ``bm25(messages_fts)``. ``joined``: the statement's FROM holds ``SIZE_JOIN``, the blob
    is read from it. ``term``: the query is one term matched through several phrases (a short
    prefix's expansion, ``planned_term``), scored as the window plan scores it by
    ``hermes_bm25_term`` (its one ``rows``: the term's)."""
    if compiled_scorer(conn):
        size = "sized.sz" if joined else _SIZE
        if term:
            return f"hermes_bm25_term(messages_fts, {size}, {rows[0]})"
        return f"hermes_bm25(messages_fts, {size}" + "".join(f", {r}" for r in rows) + ")"
    return "bm25(messages_fts)"


def _unpack(value: int | str) -> tuple[int, list[int]]:
    """(row length, count per term) from a ``_Frequencies`` value."""
    if isinstance(value, int):
        if value < 0:  # two terms
            value = -value - 1
            return value >> 32, [(value >> 16) & 0xFFFF, value & 0xFFFF]
        return value >> 32, [value & 0xFFFFFFFF]
    numbers = [int(n) for n in value.split()]
    return numbers[0], numbers[1:]


def _idf(rows: int, hits: float) -> float:
    """bm25 inverse document frequency exactly as FTS5 computes it."""
    idf = math.log((rows - hits + 0.5) / (hits + 0.5))
    return idf if idf > 0.0 else 1e-6


def _bm25(length: int, counts: list[int], idfs: list[float], avgdl: float) -> float:
    """FTS5's ``bm25()`` (k1 1.2, b 0.75, weight 1), negative: smaller is better."""
    score = 0.0
    for freq, idf in zip(counts, idfs, strict=True):
        score += idf * (
            (freq * (BM25_K1 + 1.0)) / (freq + BM25_K1 * (1 - BM25_B + BM25_B * length / avgdl))
        )
    return -1.0 * score


def _one_term_scores(
    raw: list[tuple[int, int]], idf: float, avgdl: float
) -> list[tuple[float, int]]:
    """``_bm25`` inlined over (``length << 32 | count``, rowid) rows of a one-term query."""
    k1, b = BM25_K1, BM25_B
    return [
        (-(idf * ((f * (k1 + 1.0)) / (f + k1 * (1 - b + b * (v >> 32) / avgdl)))), rowid)
        for v, rowid in raw
        for f in (v & 0xFFFFFFFF,)
    ]


def _two_term_scores(
    raw: list[tuple[int | str, int]], idfs: list[float], avgdl: float
) -> list[tuple[float, int]]:
    """``_bm25`` inlined over the rows of a two-term query (the packed value; a text one, counts
    past 65535, through ``_unpack``): the same floating-point operations, so the same scores."""
    k1, b = BM25_K1, BM25_B
    idf0, idf1 = idfs
    out: list[tuple[float, int]] = []
    append = out.append
    for value, rowid in raw:
        if isinstance(value, str) or value >= 0:
            length, counts = _unpack(value)
            append((_bm25(length, counts, idfs, avgdl), rowid))
            continue
        v = -value - 1
        norm = k1 * (1 - b + b * (v >> 32) / avgdl)
        f0, f1 = (v >> 16) & 0xFFFF, v & 0xFFFF
        append(
            (
                -(
                    idf0 * ((f0 * (k1 + 1.0)) / (f0 + norm))
                    + idf1 * ((f1 * (k1 + 1.0)) / (f1 + norm))
                ),
                rowid,
            )
        )
    return out


def _rows_from(conn: apsw.Connection, oldest: int, rows: int) -> float:
    """How many indexed rows have a row id of at least ``oldest``.

    Counted up to ``SPAN_CAP`` rows (~2 ms); beyond that, assumed spread evenly over the row
    ids (the term is then rare enough that the idf moves by less than a percent).
    """
    (newer,) = conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM messages_fts_docsize WHERE id >= ?"
        f" LIMIT {int(SPAN_CAP)})",
        (oldest,),
    ).fetchone()
    if int(newer) < SPAN_CAP:
        return float(newer)
    low, high = conn.execute(
        "SELECT (SELECT min(id) FROM messages_fts_docsize),"
        " (SELECT max(id) FROM messages_fts_docsize)"
    ).fetchone()
    return max(float(SPAN_CAP), rows * (int(high) - oldest + 1) / (int(high) - int(low) + 1))


def _estimated_hits(conn: apsw.Connection, found: int, oldest: int, rows: int) -> float:
    """Rows matching a term that has ``found`` matches from row id ``oldest`` up."""
    return found * rows / max(_rows_from(conn, oldest, rows), found)


def _term_hits(
    conn: apsw.Connection,
    term: _Term,
    cap: int,
    rows: int,
    newest: tuple[int, int] | None = None,
    counted: tuple[int, int] | None = None,
) -> float:
    """How many rows match ``term``: exact when few, else estimated from its newest ``cap``.

    A one-word term is counted up to ``COUNT_CAP`` (a doclist walk, ~0.35 ms for 3,000 rows); a
    phrase only up to ``cap`` (checking positions costs more). ``newest`` is (found, oldest row
    id) of a pass over the newest ``cap`` matches already made; ``counted`` the same of the
    ``COUNT_CAP`` pass of a one-word term, when the caller made it.
    """
    expr = term.expr()
    if term.single_token and len(term.phrases) <= COUNTED_PHRASES:
        found, oldest = (
            counted
            or conn.execute(
                "SELECT count(*), min(rowid) FROM (SELECT rowid FROM messages_fts"
                f" WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT {int(COUNT_CAP)})",
                (expr,),
            ).fetchone()
        )
        if int(found) < COUNT_CAP:
            return float(found)
        newest = (int(found), int(oldest))  # a bigger sample than the window's
    if newest is None:
        found, oldest = conn.execute(
            "SELECT count(*), min(rowid) FROM (SELECT rowid FROM messages_fts"
            f" WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT {int(cap)})",
            (expr,),
        ).fetchone()
        if int(found) < cap:
            return float(found)
        newest = (int(found), int(oldest))
    return _estimated_hits(conn, newest[0], newest[1], rows)


class Candidates:
    """Recency-ordered pages of matches, scored with bm25 once its statistics are known."""

    def __init__(
        self,
        conn: apsw.Connection,
        query: str,
        terms: Sequence[Term] | None = None,
        counted: tuple[int, int] | None = None,
        samples: TermSamples | None = None,
    ) -> None:
        self.conn = conn
        self.counted = counted
        """(matches up to ``COUNT_CAP``, oldest row id) of a one-word query, counted already."""
        self.samples = samples
        """Each term's newest matches on a big index (``TermSamples``): its idf estimate, and
        the floor of the first page (None: every idf counted, no floor)."""
        self.floor = samples.floor if samples is not None else None
        """Lowest row id the first page reads (the rarest term's newest ``size`` matches)."""
        self.terms = _plan_terms(conn, parse_terms(query) if terms is None else terms)
        self.match = " AND ".join(t.expr() for t in self.terms)
        self.sizes = [len(t.phrases) for t in self.terms]
        self.freq = _frequencies(conn)
        self.rows = 0
        self.tokens = 0
        self.idfs: list[float] | None = None

    def page(
        self, below: int | None, size: int, floor: int | None = None
    ) -> list[tuple[float, int]]:
        """(bm25, rowid) of the ``size`` most recent matches older than row id ``below`` (the
        first page: not older than ``self.floor``); with both ``below`` and ``floor``, every
        match from ``floor`` up to ``below``, read oldest first (FTS5 seeks to a lower bound
        going forwards, where a backwards walk to an upper bound passes every newer row).

        A first page whose samples bound the matches to at most ``size`` (a term with fewer
        matches, or the floor's span holding ``size`` of the rarest term's) reads them all
        oldest first too: the same rows, and FTS5's forward walk seeks the other terms' doclists
        for about two thirds of the backward walk's cost."""
        call, args = self.freq.call(self.sizes)
        sql = f"SELECT {call}, rowid FROM messages_fts WHERE messages_fts MATCH ?"
        args.append(self.match)
        if below is None:
            floor = self.floor
        else:
            sql += " AND rowid < ?"
            args.append(below)
        if floor is not None:
            sql += " AND rowid >= ?"
            args.append(floor)
        forwards = (below is not None and floor is not None) or (
            below is None and self._bounded_by(size)
        )
        if forwards:
            sql += " ORDER BY rowid"
        else:
            sql += f" ORDER BY rowid DESC LIMIT {int(size)}"  # a literal: see fused_hits
        raw: list[tuple[int | str, int]] = self.conn.execute(sql, args).fetchall()
        if not raw:
            return []
        if not self.rows:
            self.rows, self.tokens = self.freq.totals(self.conn)
        if self.idfs is None:
            complete = below is None and floor is None and len(raw) < size
            # Every match from the floor up was read: the span starts at the floor.
            spanned = floor is not None and (below is not None or len(raw) < size)
            oldest = floor if spanned and floor is not None else raw[0 if forwards else -1][1]
            self.idfs = self._idfs(len(raw), oldest, complete, size)
        avgdl = self.tokens / self.rows
        if len(self.idfs) == 1:
            return _one_term_scores(cast(list[tuple[int, int]], raw), self.idfs[0], avgdl)
        if len(self.idfs) == 2:
            return _two_term_scores(raw, self.idfs, avgdl)
        scored: list[tuple[float, int]] = []
        for value, rowid in raw:
            length, counts = _unpack(value)
            scored.append((_bm25(length, counts, self.idfs, avgdl), rowid))
        return scored

    def _bounded_by(self, size: int) -> bool:
        """Whether the first page's matches are known to number at most ``size``: each is a
        match of every term, and a term's sample counted all its matches (from the floor up,
        when there is one) below ``size``."""
        samples = self.samples
        return (
            samples is not None
            and bool(samples.found)
            and (min(n for n, _ in samples.found) <= size)
        )

    def _idfs(self, found: int, oldest: int, complete: bool, cap: int) -> list[float]:
        """bm25 idf per term: exact when its matches are fewer than ``cap``, else estimated."""
        rows = self.rows
        if len(self.terms) == 1:
            if complete:
                return [_idf(rows, float(found))]
            hits = _term_hits(self.conn, self.terms[0], cap, rows, (found, oldest), self.counted)
            return [_idf(rows, hits)]
        if self.samples is not None:
            return [_idf(rows, hits) for hits in self.samples.estimates]
        return [_idf(rows, _term_hits(self.conn, t, cap, rows)) for t in self.terms]
