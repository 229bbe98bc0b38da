"""Full-text search on PostgreSQL: ``tsvector`` + GIN for words, phrases, prefixes and CJK.

The query language is SQLite's (``queries/fts_query.py``): whitespace-separated terms, all
required; double quotes keep a phrase; a trailing ``*`` makes a prefix; punctuation inside a
term (``chat-send``, ``P2.2``, emails, URLs) is never syntax. Both backends split text with the
same ``hermes`` tokenizer (``tokens.py``), so a term matches the same messages on both:

- ``messages_fts (id, tsv)`` holds each message's tokens with positions; a term is a
  ``tsquery`` phrase of its tokens (``'chat' <-> 'send'``), a prefix term ends in ``:*``
  (PostgreSQL's GIN index answers prefix lexemes itself), every term ANDed. A CJK term is a
  phrase of its characters (one token each), checked against the positions like any phrase,
  so characters separated by punctuation in the text match as on SQLite.

Ranking is ``ts_rank`` over the most recent ``window`` matches (the bounded plan of SQLite,
widening while filters leave too few hits), found slice by slice of ids, newest first
(``candidates``); snippets are cut by the same highlighter as on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hermes_es.aggregates.state import SessionState
from hermes_es.aggregates.validation import content_text
from hermes_es.projections.base import Change, message_row_id
from hermes_es.projections.search import new_messages
from hermes_es.store.postgres.tokens import tsquery_text, tsvector_literal

if TYPE_CHECKING:
    from hermes_es.queries.search import SearchHit

CANDIDATE_WINDOW = 2000


class PgSearchProjector:
    """Indexes every stored message row; rows are only ever added or physically deleted."""

    name = "search"

    def __init__(self, prefix: str = "", *, bulk: bool = False) -> None:
        self.p = prefix
        self.table = f"{prefix}messages_fts"
        self._bulk = bulk
        self._insert = f"INSERT INTO {self.table} (id, tsv) VALUES (?, ?::tsvector)"

    def tables(self) -> list[str]:
        """Table names."""
        return [self.table]

    def schema(self) -> list[str]:
        """Message id and its tokens."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            " id BIGINT PRIMARY KEY, tsv TSVECTOR NOT NULL)"
        ]

    def indexes(self) -> list[str]:
        """GIN over the tokens; a BRIN over the ids (rows arrive in id order, so it maps an id
        range to its heap pages for a few kilobytes: ``candidates`` ANDs it with the GIN
        bitmap). No trigram index: CJK terms are phrases like any other."""
        return [
            "CREATE INDEX IF NOT EXISTS messages_fts_tsv ON messages_fts USING gin (tsv)",
            "CREATE INDEX IF NOT EXISTS messages_fts_ids ON messages_fts USING brin (id)",
        ]

    def _rows(self, changes: Sequence[Change]) -> list[tuple[int, str]]:
        return [
            (message_row_id(change.position, i), tsvector_literal(content_text(m.content)))
            for change in changes
            for i, m in enumerate(new_messages(change.event))
        ]

    def apply(self, conn: Any, change: Change) -> None:
        """Index the text of every message the event adds."""
        rows = self._rows([change])
        if rows:
            conn.executemany(self._insert, rows)

    def apply_batch(self, conn: Any, changes: Sequence[Change]) -> None:
        """Index the messages of many events in one ``executemany``."""
        rows = self._rows(changes)
        if rows:
            conn.executemany(self._insert, rows)

    def settle(self, conn: Any, states: dict[str, SessionState]) -> None:
        """Nothing per session."""

    def forget(self, conn: Any, session_id: str) -> None:
        """Remove the session's index entries (run before its message rows go)."""
        conn.execute(
            f"DELETE FROM {self.table} WHERE id IN"
            f" (SELECT id FROM {self.p}messages WHERE session_id = ?)",
            (session_id,),
        )


FIRST_SLICE = 2048
"""Rows of the store the first slice of a search covers (the newest ones)."""
OVERSHOOT = 1.5
"""A slice after the first is sized for this many times the matches still wanted."""
SPARSE_WORK_MEM = "32MB"
"""``work_mem`` of a bitmap slice: enough for an exact (not lossy) bitmap of every page."""


def _bounds(conn: Any, below: int | None) -> tuple[int, int, float] | None:
    """(highest id below ``below``, lowest id, rows per id unit), or None for an empty index."""
    under = "" if below is None else " WHERE id < %s"
    row = conn.execute_pg(
        f"SELECT (SELECT max(id) FROM messages_fts{under}), (SELECT min(id) FROM messages_fts),"
        " (SELECT reltuples FROM pg_class WHERE oid = 'messages_fts'::regclass)",
        () if below is None else (below,),
    ).fetchone()
    if row is None or row[0] is None or row[1] is None:
        return None
    top, bottom, rows = int(row[0]), int(row[1]), float(row[2] or 0)
    return top, bottom, rows / max(top - bottom + 1, 1)


def _slice(
    conn: Any, tsquery: str, lo: int | None, hi: int, limit: int, *, walk: bool
) -> list[tuple[int, float]]:
    """(id, score) of the newest ``limit`` matches with ``lo <= id <= hi`` (``lo`` None: no
    lower bound).

    ``walk``: read the primary key backwards over the slice, checking every row, until
    ``limit`` matches (for terms in a good share of the rows); else take the slice's matches
    from the GIN index's bitmap ANDed with the id range's (BRIN) bitmap, so only the pages of
    the slice's matches are read. Either way is pinned with planner settings local to the
    statement's transaction.
    """
    # In a bitmap slice the tsquery is an InitPlan parameter, so the planner does not see it:
    # it estimates phrases as if their words were independent (``'chat' <-> 'send'``: 281
    # rows for 16,600 at 1,000,000 messages) and then skips the id range's bitmap, reading
    # every match's page; with the default estimate it ANDs the two bitmaps.
    match = "tsv @@ %s::tsquery" if walk else "tsv @@ (SELECT %s::tsquery)"
    sql = f"SELECT id, tsv FROM messages_fts WHERE {match} AND id <= %s"
    params: list[object] = [tsquery, tsquery, hi]
    if lo is not None:
        sql += " AND id >= %s"
        params.append(lo)
    sql += " ORDER BY id DESC LIMIT %s"
    params.append(limit)
    if walk:
        settings = ["SET LOCAL enable_bitmapscan = off", "SET LOCAL enable_seqscan = off"]
    else:
        settings = [
            "SET LOCAL enable_indexscan = off",
            "SET LOCAL enable_seqscan = off",
            f"SET LOCAL work_mem = '{SPARSE_WORK_MEM}'",
        ]
    ranked = f"SELECT c.id, ts_rank(c.tsv, %s::tsquery) FROM ({sql}) c"
    if conn.in_transaction:  # inside the caller's transaction: the planner's own choice
        rows = conn.execute_pg(ranked, params).fetchall()
    else:
        with conn.pipelined_transaction(settings):
            rows = conn.execute_pg(ranked, params).fetchall()
    return [(int(mid), float(score)) for mid, score in rows]


def candidates(
    conn: Any,
    tsquery: str,
    below: int | None,
    size: int,
    *,
    first_slice: int = FIRST_SLICE,
) -> list[tuple[float, int]]:
    """(score, message id) of the ``size`` most recent matches below ``below``, best first.

    A GIN index returns matches in no useful order, and checking a phrase means reading each
    match's positions from the table: asking it for every match of a frequent identifier at
    1,000,000 messages rechecked 16,600 rows to keep 2,000. So the matches are taken slice by
    slice of ids, newest first, until ``size`` are in hand or the slices reach the oldest row:

    - the first slice walks the newest ``first_slice`` rows (a frequent word stops there);
    - each next one is sized from the matches per row seen so far to bring ``OVERSHOOT``
      times the matches still wanted (sixteen times wider when none were seen);
    - a slice is walked row by row (primary key, newest first, stopping at the matches still
      wanted) while matches are dense, else read from the GIN index's bitmap ANDed with the
      id range's: the walk wins while the index's bitmap of *all* the term's matches costs
      more than the rows the walk reads in vain, i.e. above about ``sqrt(8 * size / rows)``
      matches per row; the last slice has no lower bound.

    Only the newest ``size`` matches are scored (``ts_rank``).
    """
    bounds = _bounds(conn, below)
    if bounds is None:
        return []
    top, bottom, density = bounds
    total = density * (top - bottom + 1)
    found: list[tuple[int, float]] = []
    hi = top
    # A store of a few slices (by the planner's row count) is searched in one.
    small = total <= 4 * first_slice
    span = top - bottom + 1 if small else first_slice / density
    dense_rate = min(1.0, (8 * size / max(total, 1.0)) ** 0.5)
    walk = not small
    seen_rows = 0.0
    while True:
        lo: int | None = int(hi - span) + 1
        if lo is not None and lo <= bottom:
            lo = None
        found += _slice(conn, tsquery, lo, hi, size - len(found), walk=walk)
        if len(found) >= size or lo is None:
            break
        seen_rows += (hi - lo + 1) * density
        hi = lo - 1
        rate = len(found) / seen_rows
        wanted = size - len(found)
        rows = OVERSHOOT * wanted / rate if rate > 0 else 16 * seen_rows
        span = max(rows, first_slice) / density
        walk = rate >= dense_rate
    found.sort(reverse=True)
    return sorted((-score, mid) for mid, score in found[:size])


def search_messages(
    conn: Any,
    query: str,
    *,
    limit: int,
    where: str,
    params: list[object],
    window: int = CANDIDATE_WINDOW,
    first_slice: int = FIRST_SLICE,
) -> list[SearchHit]:
    """Messages matching ``query``, best ``ts_rank`` first (``where``: the caller's filters)."""
    from hermes_es.queries.search import hits_from

    tsquery = tsquery_text(query)
    if tsquery is None or limit <= 0:
        return []
    pool: list[tuple[float, int]] = []
    below: int | None = None
    size = window
    while True:
        batch = candidates(conn, tsquery, below, size, first_slice=first_slice)
        pool = sorted([*pool, *batch])
        hits = hits_from(conn, query, pool, limit, where, params)
        if len(batch) < size or len(hits) >= limit:
            return hits
        below = min(mid for _, mid in batch)
        size *= 8
