"""Full-text search over messages: bm25 ranking, highlighted snippets, context, chain groups.

Query plan. ``ORDER BY rank`` makes FTS5 score every matching row before the LIMIT applies,
which costs hundreds of milliseconds for the most frequent words of a big store. The default
``bounded`` plan makes one backwards pass instead: ``… ORDER BY rowid DESC LIMIT window``
(FTS5 walks the doclists from the newest row and stops after ``window`` matches; message row
ids grow with the log position, so rowid order is recency order). When there are fewer matches
than that, they are all the matches, so rare terms keep full recall; otherwise only the most
recent ``window`` are ranked. The candidates are sorted by score in Python, joined to
``messages``/``sessions`` for the filters (source, role, state) best first, and snippets are
made only for the hits returned. If the filters leave fewer hits than asked for, the next,
eight times larger, page of older matches joins the pool, until the matches run out.

Scores. FTS5's own ``bm25()`` first counts every row that matches each term (its idf), a full
scan of the term's matches (~45 ms for ``the`` on 1,000,000 messages, more for a phrase of
common words or a short prefix). So the pass instead returns, per row, its length and each
term's count (``_Frequencies``, an auxiliary function), and the same bm25 formula (k1 1.2,
b 0.75) is applied here. A term's match count is exact when it is below the window (then the
scores equal ``bm25()`` to the bit); above it, it is estimated from how many rows the window's
newest ``window`` matches span (``messages_fts_docsize``), which only moves the idf a little
and, for a one-term query, never changes the order. A one-character prefix ``t*`` (no prefix
index) is matched as ``"t" OR "t0"* OR … OR "tz"*`` through the two-character prefix index,
counted as one term, so it too reads only the newest rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import apsw
import msgspec

from hermes_es.queries.fts_query import build_match, parse_terms

SNIPPET_OPEN = "\x02"
SNIPPET_CLOSE = "\x03"
CANDIDATE_WINDOW = 2000
"""How many most-recent matches the bounded plan ranks before widening."""
AUTOMATION_SOURCES = ("cron", "kanban", "tool")
"""Sources left out of a default search (name them with ``sources`` to search them)."""


class SearchHit(msgspec.Struct, frozen=True, kw_only=True):
    """One matching message."""

    session_id: str
    seq: int
    role: str
    snippet: str
    """Text around the match; matches are wrapped in ``\\x02`` … ``\\x03``."""
    score: float
    at: float
    source: str
    title: str
    root_id: str
    state: str
    message_id: int = 0
    ord: float = 0.0


def _filters(
    sources: Sequence[str] | None, roles: Sequence[str] | None, exclude_sources: Sequence[str]
) -> tuple[str, list[object]]:
    sql = " AND m.state IN ('active', 'compacted')"
    params: list[object] = []
    if sources:
        sql += f" AND s.source IN ({','.join('?' * len(sources))})"
        params.extend(sources)
    if exclude_sources:
        sql += f" AND s.source NOT IN ({','.join('?' * len(exclude_sources))})"
        params.extend(exclude_sources)
    if roles:
        sql += f" AND m.role IN ({','.join('?' * len(roles))})"
        params.extend(roles)
    return sql, params


_PREFIX_EXPANSION = "0123456789abcdefghijklmnopqrstuvwxyz"
"""Second characters of the indexed two-character prefixes a one-character prefix becomes."""
COUNT_CAP = 20_000
"""Up to how many matches a one-word term is counted exactly for its idf."""
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


def _non_ascii_terms(conn: apsw.Connection, first: str) -> list[str] | None:
    """Indexed words that start with ``first`` and a non-ASCII character (None: can't tell)."""
    try:
        conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.messages_fts_vocab"
            " USING fts5vocab(main, messages_fts, row)"
        )
    except apsw.ReadOnlyError:  # PRAGMA query_only forbids even a temp table
        return None
    rows = conn.execute(
        "SELECT term FROM temp.messages_fts_vocab WHERE term >= ? AND term < ?",
        (first + "\u0080", chr(ord(first) + 1)),
    )
    return sorted({str(r[0])[:2] for r in rows})


def _plan_terms(conn: apsw.Connection, query: str) -> list[_Term]:
    """The query's terms; a one-letter prefix becomes the word plus its indexed 2-prefixes.

    FTS5 answers ``t*`` by merging the doclist of every word starting with ``t`` (there is no
    one-character prefix index), which ignores LIMIT and rowid bounds. ``"t" OR "ta"* OR …``
    matches the same rows through the two-character prefix index, newest first.
    """
    tokenizer = conn.fts5_tokenizer("hermes", [])
    out: list[_Term] = []
    for term in parse_terms(query):
        tokens = [str(t[2]) for t in tokenizer(term.text.encode(), apsw.FTS5_TOKENIZE_QUERY, None)]
        first = tokens[0] if len(tokens) == 1 else ""
        others = None
        if term.prefix and len(first) == 1 and first in _PREFIX_EXPANSION:
            others = _non_ascii_terms(conn, first)
        if others is not None:
            seconds = [first + c for c in _PREFIX_EXPANSION] + others
            out.append(_Term([f'"{first}"'] + [f'"{p}"*' for p in seconds], True))
        else:
            out.append(_Term([term.to_fts()], len(tokens) == 1))
    return out


class _Frequencies:
    """FTS5 auxiliary function: a row's length in tokens and how often each term occurs in it.

    Returns ``length << 32 | count`` for a one-term query, ``-(length << 32 | count << 16 |
    count) - 1`` for two terms that occur at most 65535 times, else ``"length count …"``;
    keeps the index's row count and token total (bm25's N and average length).
    """

    def __init__(self, terms: list[_Term]) -> None:
        self.sizes = [len(t.phrases) for t in terms]
        self.single_phrases = all(size == 1 for size in self.sizes)
        self.rows = 0
        self.tokens = 0

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


def _rows_from(conn: apsw.Connection, oldest: int, rows: int) -> float:
    """How many indexed rows have a row id of at least ``oldest``.

    Counted up to ``SPAN_CAP`` rows (~2 ms); beyond that, assumed spread evenly over the row
    ids (the term is then rare enough that the idf moves by less than a percent).
    """
    (newer,) = conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM messages_fts_docsize WHERE id >= ? LIMIT ?)",
        (oldest, SPAN_CAP),
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
    conn: apsw.Connection, term: _Term, cap: int, rows: int, newest: tuple[int, int] | None = None
) -> float:
    """How many rows match ``term``: exact when few, else estimated from its newest ``cap``.

    A one-word term is counted up to ``COUNT_CAP`` (a doclist walk, ~2 ms for 20,000 rows); a
    phrase only up to ``cap`` (checking positions costs more). ``newest`` is (found, oldest row
    id) of a pass over the newest ``cap`` matches already made.
    """
    expr = term.expr()
    if term.single_token:
        found, oldest = conn.execute(
            "SELECT count(*), min(rowid) FROM (SELECT rowid FROM messages_fts"
            " WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?)",
            (expr, COUNT_CAP),
        ).fetchone()
        if int(found) < COUNT_CAP:
            return float(found)
        newest = (int(found), int(oldest))  # a bigger sample than the window's
    if newest is None:
        found, oldest = conn.execute(
            "SELECT count(*), min(rowid) FROM (SELECT rowid FROM messages_fts"
            " WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?)",
            (expr, cap),
        ).fetchone()
        if int(found) < cap:
            return float(found)
        newest = (int(found), int(oldest))
    return _estimated_hits(conn, newest[0], newest[1], rows)


class _Candidates:
    """Recency-ordered pages of matches, scored with bm25 once its statistics are known."""

    def __init__(self, conn: apsw.Connection, query: str) -> None:
        self.conn = conn
        self.terms = _plan_terms(conn, query)
        self.match = " AND ".join(t.expr() for t in self.terms)
        self.freq = _Frequencies(self.terms)
        conn.register_fts5_function("hermes_frequencies", self.freq)
        self.idfs: list[float] | None = None

    def page(self, below: int | None, size: int) -> list[tuple[float, int]]:
        """(bm25, rowid) of the ``size`` most recent matches older than row id ``below``."""
        sql = (
            "SELECT hermes_frequencies(messages_fts), rowid FROM messages_fts"
            " WHERE messages_fts MATCH ?"
        )
        args: list[object] = [self.match]
        if below is not None:
            sql += " AND rowid < ?"
            args.append(below)
        sql += " ORDER BY rowid DESC LIMIT ?"
        args.append(size)
        raw: list[tuple[int | str, int]] = self.conn.execute(sql, args).fetchall()
        if not raw:
            return []
        if self.idfs is None:
            complete = below is None and len(raw) < size
            self.idfs = self._idfs(len(raw), raw[-1][1], complete, size)
        avgdl = self.freq.tokens / self.freq.rows
        if len(self.idfs) == 1:
            return _one_term_scores(cast(list[tuple[int, int]], raw), self.idfs[0], avgdl)
        scored: list[tuple[float, int]] = []
        for value, rowid in raw:
            length, counts = _unpack(value)
            scored.append((_bm25(length, counts, self.idfs, avgdl), rowid))
        return scored

    def _idfs(self, found: int, oldest: int, complete: bool, cap: int) -> list[float]:
        """bm25 idf per term: exact when its matches are fewer than ``cap``, else estimated."""
        rows = self.freq.rows
        if len(self.terms) == 1:
            if complete:
                return [_idf(rows, float(found))]
            return [_idf(rows, _term_hits(self.conn, self.terms[0], cap, rows, (found, oldest)))]
        return [_idf(rows, _term_hits(self.conn, t, cap, rows)) for t in self.terms]


_DETAILS = (
    "SELECT m.id, m.session_id, m.seq, m.role, m.at, s.source, s.title, s.root_id, m.state,"
    " m.ord, m.content"
    " FROM messages m JOIN sessions s ON s.id = m.session_id WHERE m.id IN ({marks})"
)
SNIPPET_TOKENS = 16
DETAILS_CHUNK = 1000
"""Most candidates looked up in one ``IN (…)`` query (the first look-up asks for ``2 * limit``,
so the common case reads only the rows it returns)."""


class Highlighter:
    """Marks query tokens in message text the way FTS5 ``snippet()`` would, without FTS5.

    FTS5 would re-run the whole MATCH for every snippet (for a short prefix that means merging
    thousands of doclists each time), so snippets are cut here from the stored text with the
    same ``hermes`` tokenizer: a token is a hit when it equals a query token, or starts with
    the last token of a prefix term.
    """

    def __init__(self, conn: apsw.Connection, query: str) -> None:
        self.tokenizer = conn.fts5_tokenizer("hermes", [])
        self.exact: set[str] = set()
        self.prefixes: list[str] = []
        for term in parse_terms(query):
            tokens = [t[2] for t in self._tokens(term.text, apsw.FTS5_TOKENIZE_QUERY)]
            if not tokens:
                continue
            if term.prefix:
                self.exact.update(tokens[:-1])
                self.prefixes.append(tokens[-1])
            else:
                self.exact.update(tokens)

    def _tokens(self, text: str, flags: int) -> list[tuple[int, int, str]]:
        return [
            (int(t[0]), int(t[1]), str(t[2]))
            for t in self.tokenizer(text.encode("utf-8"), flags, None)
        ]

    def _is_hit(self, token: str) -> bool:
        return token in self.exact or any(token.startswith(p) for p in self.prefixes)

    def snippet(self, text: str, size: int = SNIPPET_TOKENS) -> str:
        """About ``size`` tokens around the first hit, hits wrapped in \x02 … \x03."""
        utf8 = text.encode("utf-8")
        tokens = self._tokens(text, apsw.FTS5_TOKENIZE_DOCUMENT)
        if not tokens:
            return text[:120]
        hits = [i for i, t in enumerate(tokens) if self._is_hit(t[2])]
        first = hits[0] if hits else 0
        lo = max(0, min(first - size // 4, len(tokens) - size))
        hi = min(len(tokens), lo + size)
        start = 0 if lo == 0 else tokens[lo][0]
        end = len(utf8) if hi == len(tokens) else tokens[hi - 1][1]
        out: list[bytes] = [b"\xe2\x80\xa6" if lo else b""]
        pos = start
        for i in range(lo, hi):
            a, b, tok = tokens[i]
            if self._is_hit(tok):
                if a == pos and out and out[-1] == SNIPPET_CLOSE.encode():
                    out[-1:] = [utf8[a:b], SNIPPET_CLOSE.encode()]  # extend an adjacent hit
                else:
                    out += [utf8[pos:a], SNIPPET_OPEN.encode(), utf8[a:b], SNIPPET_CLOSE.encode()]
                pos = b
        out.append(utf8[pos:end])
        if hi < len(tokens):
            out.append(b"\xe2\x80\xa6")
        return b"".join(out).decode("utf-8", errors="replace")


def _hits_from(
    conn: apsw.Connection,
    query: str,
    pool: list[tuple[float, int]],
    limit: int,
    where: str,
    params: list[object],
) -> list[SearchHit]:
    """The best ``limit`` pool entries that pass the filters, with snippets."""
    found: list[SearchHit] = []
    marker = Highlighter(conn, query)
    start, chunk = 0, max(2 * limit, 16)
    while start < len(pool):
        part = pool[start : start + chunk]
        start += len(part)
        chunk = min(chunk * 4, DETAILS_CHUNK)
        sql = _DETAILS.format(marks=",".join("?" * len(part))) + where
        rows = {int(r[0]): r for r in conn.execute(sql, [*(i for _, i in part), *params])}
        for score, rowid in part:
            r = rows.get(rowid)
            if r is None:
                continue
            found.append(
                SearchHit(
                    session_id=r[1],
                    seq=r[2],
                    role=r[3],
                    snippet=marker.snippet(str(r[10])),
                    score=score,
                    at=r[4],
                    source=r[5],
                    title=r[6],
                    root_id=r[7],
                    state=r[8],
                    message_id=rowid,
                    ord=r[9],
                )
            )
            if len(found) >= limit:
                return found
    return found


def _ranked(
    conn: apsw.Connection,
    match: str,
    floor: int | None,
    limit: int,
    where: str,
    params: list[object],
) -> list[SearchHit]:
    sql = (
        "SELECT m.session_id, m.seq, m.role,"
        f" snippet(messages_fts, 0, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}', '…', 16),"
        " messages_fts.rank, m.at, s.source, s.title, s.root_id, m.state, m.id, m.ord"
        " FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
        " JOIN sessions s ON s.id = m.session_id"
        " WHERE messages_fts MATCH ?"
    )
    args: list[object] = [match]
    if floor is not None:
        sql += " AND messages_fts.rowid >= ?"
        args.append(floor)
    sql += where + " ORDER BY messages_fts.rank LIMIT ?"
    args += [*params, limit]
    return [
        SearchHit(
            session_id=r[0],
            seq=r[1],
            role=r[2],
            snippet=r[3],
            score=r[4],
            at=r[5],
            source=r[6],
            title=r[7],
            root_id=r[8],
            state=r[9],
            message_id=r[10],
            ord=r[11],
        )
        for r in conn.execute(sql, args)
    ]


def search_messages(
    conn: apsw.Connection,
    query: str,
    *,
    limit: int = 20,
    sources: Sequence[str] | None = None,
    roles: Sequence[str] | None = None,
    exclude_sources: Sequence[str] = (),
    plan: str = "bounded",
    window: int = CANDIDATE_WINDOW,
) -> list[SearchHit]:
    """Messages matching ``query`` (any text is safe), best bm25 first.

    ``plan="bounded"`` ranks the ``window`` most recent matches (all of them when there are
    fewer); ``plan="full"`` ranks every match (plain ``ORDER BY rank``).
    """
    match = build_match(query)
    if match is None or limit <= 0:
        return []
    where, params = _filters(sources, roles, exclude_sources)
    if plan == "full":
        return _ranked(conn, match, None, limit, where, params)
    if plan != "bounded":
        raise ValueError(f"unknown search plan {plan!r}")
    candidates = _Candidates(conn, query)
    pool: list[tuple[float, int]] = []
    below: int | None = None
    size = window
    while True:
        batch = candidates.page(below, size)
        pool = sorted([*pool, *batch])
        hits = _hits_from(conn, query, pool, limit, where, params)
        if len(batch) < size or len(hits) >= limit:
            return hits
        below = min(rowid for _, rowid in batch)
        size *= 8


class ContextMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A neighbouring message shown around a hit."""

    seq: int
    role: str
    text: str


class SearchResult(msgspec.Struct, frozen=True, kw_only=True):
    """A hit with the display message before and after it."""

    hit: SearchHit
    before: ContextMessage | None
    after: ContextMessage | None


class SearchGroup(msgspec.Struct, frozen=True, kw_only=True):
    """The hits of one conversation (a compression chain), best hit first."""

    root_id: str
    tip_id: str
    title: str
    source: str
    results: list[SearchResult]


def _neighbour(
    conn: apsw.Connection, session_id: str, ord_: float, seq: int, after: bool
) -> ContextMessage | None:
    op, direction = (">", "ASC") if after else ("<", "DESC")
    rows = conn.execute(
        "SELECT seq, role, content FROM messages WHERE session_id = ?"
        " AND state IN ('active', 'compacted')"
        f" AND (ord {op} ? OR (ord = ? AND seq {op} ?)) ORDER BY ord {direction}, seq {direction}"
        " LIMIT 1",
        (session_id, ord_, ord_, seq),
    ).fetchall()
    if not rows:
        return None
    return ContextMessage(seq=int(rows[0][0]), role=str(rows[0][1]), text=str(rows[0][2]))


def with_context(conn: apsw.Connection, hit: SearchHit) -> SearchResult:
    """A hit with one display message of context on either side."""
    return SearchResult(
        hit=hit,
        before=_neighbour(conn, hit.session_id, hit.ord, hit.seq, after=False),
        after=_neighbour(conn, hit.session_id, hit.ord, hit.seq, after=True),
    )


def _tips(conn: apsw.Connection, roots: Sequence[str]) -> dict[str, tuple[str, str]]:
    if not roots:
        return {}
    rows = conn.execute(
        "SELECT root_id, id, title FROM sessions WHERE continued_into = ''"
        f" AND root_id IN ({','.join('?' * len(roots))})",
        list(roots),
    ).fetchall()
    return {str(r): (str(i), str(t)) for r, i, t in rows}


def group_by_chain(conn: apsw.Connection, hits: Sequence[SearchHit]) -> list[SearchGroup]:
    """Hits grouped per compression chain, groups ordered by their best hit, with context."""
    order: dict[str, list[SearchHit]] = {}
    for hit in hits:
        order.setdefault(hit.root_id or hit.session_id, []).append(hit)
    tips = _tips(conn, list(order))
    groups: list[SearchGroup] = []
    for root, members in order.items():
        tip_id, tip_title = tips.get(root, (members[0].session_id, members[0].title))
        groups.append(
            SearchGroup(
                root_id=root,
                tip_id=tip_id,
                title=tip_title or members[0].title,
                source=members[0].source,
                results=[with_context(conn, h) for h in members],
            )
        )
    return groups


def search_grouped(
    conn: apsw.Connection,
    query: str,
    *,
    limit: int = 20,
    sources: Sequence[str] | None = None,
    roles: Sequence[str] | None = None,
) -> list[SearchGroup]:
    """What ``hermes sessions search`` shows: automation sources out unless named."""
    exclude = () if sources else AUTOMATION_SOURCES
    hits = search_messages(
        conn, query, limit=limit, sources=sources, roles=roles, exclude_sources=exclude
    )
    return group_by_chain(conn, hits)
