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

Where the window plan's statistics are exact (every match fits the window, or a one-word
query with fewer than ``COUNT_CAP`` matches), FTS5's own ``bm25()`` scores the same candidates
in C, with the same scores, in one statement that also counts them, joins the best
``2 * limit`` to their details (all of them only when the filters leave too few), filters and
reads the text of only the hits it returns (``fused_hits``, ``queries/search_plan.py``);
otherwise the window is scored in Python (``queries/bm25.py``). On an index of more than
200,000 rows a several-term query's candidates are bounded by its rarest term's newest
matches (``queries/term_sample.py``; the ranking rule: docs/search.md). Snippets:
``queries/snippets.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw
import msgspec

from hermes_es.queries import bm25
from hermes_es.queries.bm25 import Candidates
from hermes_es.queries.event_text import text_sql
from hermes_es.queries.fts_query import Term, parse_terms
from hermes_es.queries.identifiers import identifier_terms
from hermes_es.queries.listing import DEFAULT_HIDDEN_SOURCES
from hermes_es.queries.search_plan import FusedPlan, fused_plan, window_samples
from hermes_es.queries.snippets import SNIPPET_CLOSE, SNIPPET_OPEN, Highlighter
from hermes_es.queries.term_sample import TermSamples, index_totals

CANDIDATE_WINDOW = 2000
"""How many most-recent matches the bounded plan ranks before widening."""
PLANS = ("bounded", "window", "full")
"""``search_messages`` plans: see its docstring."""
AUTOMATION_SOURCES = DEFAULT_HIDDEN_SOURCES
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


_DETAILS = (
    "SELECT m.id, m.session_id, m.seq, m.role, m.at, s.source, s.title, s.root_id, m.state,"
    " m.ord{text} FROM messages m JOIN sessions s ON s.id = m.session_id WHERE m.id IN ({marks})"
)
_TEXTS = "SELECT m.id, {text} FROM messages m WHERE m.id IN ({marks})"
DETAILS_CHUNK = 1000
"""Most candidates looked up in one ``IN (…)`` query (the first look-up asks for ``2 * limit``,
so the common case reads only the rows it returns)."""


def _snippet_sql(marker: Highlighter, text: str) -> tuple[str, list[object]]:
    """The SQL expression reading ``text`` for a hit: its snippet when the connection cuts them
    in SQL (``hermes_snippet``; its arguments come first), else the text itself."""
    if marker.compiled:
        return marker.sql(text)
    return text, []


def _cut(marker: Highlighter, value: object) -> str:
    """A hit's snippet from the column ``_snippet_sql`` read."""
    if marker.compiled and isinstance(value, str):
        return value
    return marker.snippet(str(value))


def hits_from(
    conn: apsw.Connection,
    query: str,
    pool: list[tuple[float, int]],
    limit: int,
    where: str,
    params: list[object],
    terms: Sequence[Term] | None = None,
) -> list[SearchHit]:
    """The best ``limit`` pool entries that pass the filters, with snippets.

    A look-up of more candidates than hits still wanted reads their details without the text
    (which is decoded from the log), then the snippets of the hits it keeps."""
    found: list[SearchHit] = []
    marker = Highlighter(conn, query, terms)
    start, chunk = 0, max(2 * limit, 16)
    while start < len(pool):
        part = pool[start : start + chunk]
        start += len(part)
        chunk = min(chunk * 4, DETAILS_CHUNK)
        marks = ",".join("?" * len(part))
        wanted = limit - len(found)
        with_text = len(part) <= wanted
        expr, snip = (
            _snippet_sql(marker, text_sql(conn, "m.id", "m.content")) if with_text else ("", [])
        )
        sql = _DETAILS.format(text=f", {expr}" if with_text else "", marks=marks) + where
        args = [*snip, *(i for _, i in part), *params]
        rows = {int(r[0]): r for r in conn.execute(sql, args)}
        kept = [(score, rows[rowid]) for score, rowid in part if rowid in rows][:wanted]
        if with_text:
            snippets = {int(r[0]): _cut(marker, r[10]) for _, r in kept}
        else:
            chosen = [int(r[0]) for _, r in kept]
            expr, snip = _snippet_sql(marker, text_sql(conn, "m.id", "m.content"))
            sql = _TEXTS.format(text=expr, marks=",".join("?" * len(chosen)))
            snippets = (
                {int(i): _cut(marker, t) for i, t in conn.execute(sql, [*snip, *chosen])}
                if chosen
                else {}
            )
        for score, r in kept:
            found.append(
                SearchHit(
                    session_id=r[1],
                    seq=r[2],
                    role=r[3],
                    snippet=snippets[int(r[0])],
                    score=score,
                    at=r[4],
                    source=r[5],
                    title=r[6],
                    root_id=r[7],
                    state=r[8],
                    message_id=int(r[0]),
                    ord=r[9],
                )
            )
        if len(found) >= limit:
            return found
    return found


_FUSED = (
    "WITH n AS MATERIALIZED (SELECT count(*) AS cnt, min(rowid) AS oldest FROM (SELECT rowid"
    " FROM messages_fts WHERE messages_fts MATCH ?1{order} LIMIT {cap})),"
    " h AS MATERIALIZED ({hits}),"
    " c AS (SELECT {score} AS b, messages_fts.rowid AS rid FROM messages_fts{sized}"
    " WHERE messages_fts MATCH ?1"
    " AND messages_fts.rowid >= (SELECT CASE WHEN hits IS NOT NULL THEN -9223372036854775808"
    " ELSE 9223372036854775807 END FROM h)"
    "{walk} LIMIT {window})"
    " SELECT h.cnt, h.oldest, h.hits IS NOT NULL, x.* FROM h LEFT JOIN (SELECT y.*,"
    " {text} FROM (SELECT t.b, m.id, m.session_id,"
    " m.seq, m.role, m.at, s.source, s.title, s.root_id, m.state, m.ord"
    " FROM (SELECT b, rid FROM c ORDER BY b, rid LIMIT {top}) t JOIN messages m ON m.id = t.rid"
    " JOIN sessions s ON s.id = m.session_id WHERE 1{where} ORDER BY t.b, t.rid LIMIT {limit}) y) x"
    " ON 1 ORDER BY x.b, x.id"
)
_GATED = "SELECT cnt, oldest, CASE WHEN cnt <= ?2 THEN cnt END AS hits FROM n"
"""The statement ranks when the count passes the gate ``?2``, with the count as the rows."""
_ESTIMATED = (
    "SELECT cnt, oldest, CASE WHEN cnt < {cap} THEN cnt ELSE (SELECT CASE WHEN k < {span}"
    " THEN n.cnt * ?2 / (max(k, n.cnt) * 1.0) END FROM (SELECT count(*) AS k FROM (SELECT 1"
    " FROM messages_fts_docsize WHERE id >= n.oldest LIMIT {span}))) END AS hits FROM n"
)
"""A one-word query's rows for its idf, as the window plan takes them (``bm25._term_hits``):
its count below the cap; at the cap, estimated from the rows its newest matches span
(counted up to ``SPAN_CAP``; ``?2`` is the index's row count); NULL beyond (the window plan
then extrapolates). The same integer product and float division, so the same float."""


_NEWEST_FIRST = " ORDER BY rowid DESC"


def _phrase_rows(
    conn: apsw.Connection, plan: FusedPlan, number: int
) -> tuple[list[str], list[object]]:
    """SQL of each phrase's matching rows for ``hermes_bm25`` (the same numbers ``bm25()``
    counts by walking every match of each phrase: ~2.4 ms for ``the`` at 100,000 messages),
    and their arguments, numbered from ``?number``: a one-word query's count (the statement
    ranks only when it counted every match), each word's rows in the index's vocabulary
    (``fts5vocab``, ~1.6 ms for ``the``: the same doclist, without a cursor per row). None
    where the scorer is FTS5's own or a term is a phrase."""
    if not bm25.compiled_scorer(conn):
        return [], []
    if plan.one_word:
        return ["(SELECT cnt FROM n)"], []
    if plan.words is None or not bm25.vocabulary(conn):
        return [], []
    sql = [
        f"(SELECT doc FROM {bm25.VOCABULARY} WHERE term = ?{number + k})"
        for k in range(len(plan.words))
    ]
    return sql, list(plan.words)


_COUNTED = (
    "SELECT count(*) AS n FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?1"
    " LIMIT {cap})"
)
_RANKED = (
    "WITH c AS (SELECT {score} AS b, messages_fts.rowid AS rid FROM messages_fts{sized}"
    " WHERE messages_fts MATCH ?1 LIMIT {window})"
    " SELECT y.*, {text} FROM (SELECT t.b, m.id, m.session_id, m.seq, m.role, m.at, s.source,"
    " s.title, s.root_id, m.state, m.ord FROM (SELECT b, rid FROM c ORDER BY b, rid LIMIT {top})"
    " t JOIN messages m ON m.id = t.rid JOIN sessions s ON s.id = m.session_id WHERE 1{where}"
    " ORDER BY t.b, t.rid LIMIT {limit}) y ORDER BY y.b, y.id"
)
"""The ranking of a several-word query whose matches were counted (``_counted_hits``)."""


def _hit(marker: Highlighter, r: Any, at: int) -> SearchHit:
    """The hit of a row of ``_FUSED`` (``at`` 3) or ``_RANKED`` (``at`` 0): bm25, message id,
    session, seq, role, time, source, title, root, state, ord, snippet."""
    return SearchHit(
        session_id=r[at + 2],
        seq=r[at + 3],
        role=r[at + 4],
        snippet=_cut(marker, r[at + 11]),
        score=r[at],
        at=r[at + 5],
        source=r[at + 6],
        title=r[at + 7],
        root_id=r[at + 8],
        state=r[at + 9],
        message_id=r[at + 1],
        ord=r[at + 10],
    )


def _counted_hits(
    conn: apsw.Connection,
    marker: Highlighter,
    match: str,
    plan: FusedPlan,
    words: list[str],
    top: int,
    limit: int,
    where: str,
    params: list[object],
) -> tuple[list[SearchHit], int, int, bool]:
    """``fused_hits`` of a several-word query with the compiled scorer, in three short
    statements instead of one: count the matches up to the plan's cap (none, or more than the
    gate: done, nothing else is read); each word's rows from the vocabulary; then rank, those
    rows handed in as numbers. The one statement walked the matches a second time even when
    the first walk found none, and its vocabulary look-ups inside the ranking cost more than
    the same look-ups on their own (bench/README.md, "Two words in three statements")."""
    unique = list(dict.fromkeys(words))
    looked = "".join(
        f", CASE WHEN n BETWEEN 1 AND {int(plan.gate)} THEN (SELECT doc FROM {bm25.VOCABULARY}"
        f" WHERE term = ?{k + 2}) END"
        for k in range(len(unique))
    )
    sql = f"SELECT n{looked} FROM ({_COUNTED.format(cap=int(plan.count_cap))})"
    found, *rows = conn.execute(sql, [match, *unique]).fetchall()[0]
    if found == 0 or found > plan.gate:
        return [], found, 0, found == 0
    counts = dict(zip(unique, rows, strict=True))
    text, snip = (
        marker.sql(text_sql(conn, "y.id"), 2) if marker.compiled else (text_sql(conn, "y.id"), [])
    )
    first = 2 + len(snip)
    score = bm25.scorer(conn, [f"?{first + k}" for k in range(len(words))], joined=True)
    sql = _RANKED.format(
        score=score,
        sized=bm25.SIZE_JOIN,
        window=int(plan.window),
        text=text,
        top=int(top),
        where=where,
        limit=int(limit),
    )
    rows = conn.execute(sql, [match, *snip, *(counts[w] for w in words), *params]).fetchall()
    return [_hit(marker, r, 0) for r in rows], found, 0, True


def fused_hits(
    conn: apsw.Connection,
    query: str,
    match: str,
    plan: FusedPlan,
    top: int,
    limit: int,
    where: str,
    params: list[object],
    terms: Sequence[Term] | None = None,
) -> tuple[list[SearchHit], int, int, bool]:
    """One statement: count the newest matches (up to ``plan.count_cap``); when the count
    passes ``plan.gate`` (a one-word query with the compiled scorer: when its rows are known,
    counted or estimated as the window plan estimates them), rank the newest ``plan.window``
    with bm25 (FTS5's, or the compiled build's ``hermes_bm25``: the same scores,
    ``bm25.scorer``), join the best ``top`` (-1: all) to their details, keep the best ``limit``
    that pass the filters (ties by row id) and cut the snippets of only those. Returns the
    hits, the count, the oldest row id counted and whether it ranked (if not: no hits, and
    bm25 never ran).

    A several-term plan's gate is its window: the statement ranks only when every match is in
    the window, so it counts and ranks in row id order (FTS5's forward walk seeks the other
    terms' doclists for less than its backward one); its oldest row id is then the first
    match's (unused: only a one-word count is handed on)."""
    marker = Highlighter(conn, query, terms)
    if not plan.one_word and plan.words and bm25.compiled_scorer(conn) and bm25.vocabulary(conn):
        return _counted_hits(conn, marker, match, plan, plan.words, top, limit, where, params)
    text = text_sql(conn, "y.id")
    text, snip = marker.sql(text, 3) if marker.compiled else (text, [])
    rows_sql, words = _phrase_rows(conn, plan, 3 + len(snip))
    order = _NEWEST_FIRST if plan.one_word else ""
    estimated = plan.one_word and bool(rows_sql)
    if estimated:
        rows_sql = ["(SELECT hits FROM h)"]
        hits = _ESTIMATED.format(span=int(bm25.SPAN_CAP), cap=int(plan.count_cap))
        third: int = index_totals(conn)[0]
    else:
        hits, third = _GATED, plan.gate
    joined = bm25.compiled_scorer(conn)
    score = bm25.scorer(conn, rows_sql, joined=joined, term=plan.phrases > 1)
    sized = bm25.SIZE_JOIN if joined else ""
    walk = " ORDER BY messages_fts.rowid DESC" if plan.one_word else ""
    # The LIMITs are literals: a statement whose LIMIT is a bound parameter is prepared again
    # at every run (about half of a rare word's statement; bench/README.md, issue 12).
    sql = _FUSED.format(
        where=where,
        order=order,
        walk=walk,
        score=score,
        text=text,
        hits=hits,
        sized=sized,
        cap=int(plan.count_cap),
        window=int(plan.window),
        top=int(top),
        limit=int(limit),
    )
    rows = conn.execute(sql, [match, third, *snip, *words, *params]).fetchall()
    found, oldest, ranked = int(rows[0][0]), int(rows[0][1] or 0), bool(rows[0][2])
    if rows[0][4] is None:
        return [], found, oldest, ranked
    return [_hit(marker, r, 3) for r in rows], found, oldest, ranked


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
    sql += where + f" ORDER BY messages_fts.rank LIMIT {int(limit)}"
    args += params
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
    fewer), by FTS5's ``bm25()`` where its statistics equal the window plan's
    (``queries/search_plan.py``), else in Python; ``plan="window"`` always scores in Python
    (the reference the bounded plan must equal); ``plan="full"`` ranks every match (plain
    ``ORDER BY rank``).
    """
    terms = parse_terms(query)
    if not terms or limit <= 0:
        return []
    where, params = _filters(sources, roles, exclude_sources)
    own = getattr(conn, "search_messages", None)
    if own is not None:  # a backend with its own full-text index (PostgreSQL)
        hits: list[SearchHit] = own(query, limit=limit, where=where, params=params)
        return hits
    terms = identifier_terms(conn, terms)
    match = " AND ".join(term.to_fts() for term in terms)
    if plan == "full":
        return _ranked(conn, match, None, limit, where, params)
    if plan not in PLANS:
        raise ValueError(f"unknown search plan {plan!r}")
    counted: tuple[int, int] | None = None
    samples: TermSamples | None = None
    if plan == "bounded":
        fused, samples = fused_plan(conn, terms, window)
        if fused is not None:
            top = max(2 * limit, 16)
            found_by = (conn, query, fused.match or match, fused)
            hits, found, oldest, ranked = fused_hits(*found_by, top, limit, where, params, terms)
            if ranked:
                if len(hits) < limit and min(found, window) >= top:  # the filters left too few
                    hits, _, _, _ = fused_hits(*found_by, -1, limit, where, params, terms)
                if found <= window or len(hits) >= limit:
                    return hits
            if fused.one_word:
                counted = (found, oldest)
    else:
        samples = window_samples(conn, terms)
    candidates = Candidates(conn, query, terms, counted, samples)
    pool: list[tuple[float, int]] = []
    below: int | None = None
    floor = candidates.floor
    step = 1
    size = window
    while True:
        batch = candidates.page(below, size, floor)
        pool = sorted([*pool, *batch])
        hits = hits_from(conn, query, pool, limit, where, params, terms)
        if len(hits) >= limit or (len(batch) < size and floor is None):
            return hits
        if floor is not None and (below is not None or len(batch) < size):
            # Every match from the floor up is read: the next page, a span 8 times as wide.
            if samples is None or floor <= samples.low:
                return hits
            below, floor = floor, samples.next_floor(floor, step)
            step += 1
        else:
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
