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

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from psycopg.rows import tuple_row

from hermes_es.aggregates.state import SessionState
from hermes_es.aggregates.validation import content_text
from hermes_es.projections.base import Change, message_row_id
from hermes_es.projections.search import new_messages
from hermes_es.store.postgres import id_blocks
from hermes_es.store.postgres.lexeme_shares import lexeme_shares
from hermes_es.store.postgres.tokens import (
    INCOMPLETE,
    Term,
    index_query,
    is_identifier,
    match_query,
    prefix_lexeme,
    search_terms,
    tsquery_text,
    tsvector_literal,
)

if TYPE_CHECKING:
    from hermes_es.queries.search import SearchHit

CANDIDATE_WINDOW = 2000
SLICED: bool | None = None
"""Whether ``candidates`` takes matches slice by slice (else one statement); None: slices for
a query with a pair lexeme or a prefix, one statement for plain words (the cheaper way for each
at 1,000,000 messages, bench/README.md)."""


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
        rows = []
        for change in changes:
            for i, m in enumerate(new_messages(change.event)):
                mid = message_row_id(change.position, i)
                rows.append((mid, row_tsvector(mid, content_text(m.content))))
        return rows

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


def row_tsvector(row_id: int, text: str) -> str:
    """The ``tsvector`` input of one message row: its tokens, pair and prefix lexemes
    (``tokens.py``) and its id-block lexemes (``id_blocks.py``)."""
    return tsvector_literal(text) + " " + id_blocks.literal(row_id)


class Query(NamedTuple):
    """A search as the index sees it."""

    match: str
    """The ``tsquery`` finding the matches (``tokens.match_query``: pairs for phrases)."""
    rank: str
    """The ``tsquery`` scoring them (``tokens.tsquery_text``: phrases of tokens)."""
    terms: tuple[Term, ...] = ()
    """The terms (``tokens.search_terms``): what ``lexeme_shares`` estimates from."""
    gin: str = ""
    """The part of ``match`` the GIN index answers without positions (``tokens.index_query``;
    empty: ``match`` itself)."""
    checked: bool = False
    """Whether the rows ``gin`` finds still need ``match`` checked (a phrase of 3+ tokens)."""

    @classmethod
    def of(cls, user_query: str) -> Query | None:
        """The search of ``user_query``; None when nothing in it is searchable."""
        match, rank = match_query(user_query), tsquery_text(user_query)
        index = index_query(user_query)
        if match is None or rank is None or index is None:
            return None
        return cls(match, rank, tuple(search_terms(user_query)), index[0], index[1])

    def where(self, *, planned: bool) -> tuple[str, list[object]]:
        """The condition finding the matches (``gin``, then ``match`` checked as a filter
        where needed) and its parameters. ``planned``: the planner sees the ``tsquery`` (and
        estimates its rows); else it is an InitPlan parameter, estimated at a fixed share."""
        index = self.gin or self.match
        sql = "tsv @@ %s::tsquery" if planned else "tsv @@ (SELECT %s::tsquery)"
        if not self.checked:
            return sql, [index]
        return sql + " AND (tsv @@ %s::tsquery) IS TRUE", [index, self.match]

    def lexemes(self) -> int:
        """The postings lists the index reads for the matching query, weighted (a prefix
        merges every lexeme it covers: ``PREFIX_WEIGHT``). The words of a phrase checked by
        their positions and the ``§`` marker are skipped through, not read: they do not
        count."""
        read = _PHRASE.sub("", self.match)
        return sum(
            PREFIX_WEIGHT if m.group(1) else 1
            for m in _LEXEME.finditer(read)
            if m.group(0) != _MARKER
        )


_PHRASE = re.compile(r"\([^()]*<->[^()]*\)")
"""A phrase of tokens in a ``tsquery`` (no token holds a parenthesis)."""
_MARKER = "'" + INCOMPLETE + "'"


REINDEX_BATCH = 20_000
"""Message rows tokenized per batch when the index is rebuilt in place (``reindex``)."""


def reindex(curs: Any, progress: Callable[[int], None] | None = None) -> int:
    """Rewrite ``messages_fts`` from the text of the message rows it indexes (``messages``
    holds each message's searchable text), inside the caller's transaction: every ``tsvector``
    made again by ``row_tsvector`` into a fresh table, which then replaces the old one and
    gets its indexes. The upgrade of PostgreSQL layouts 2 to 4 (tsvectors without pair,
    prefix, block or identifier lexemes), without replaying the log. A row whose message row
    is gone keeps its tsvector (with its id-block lexemes added). Returns the rows written;
    ``progress`` gets the count after each batch."""
    curs.execute("DROP TABLE IF EXISTS reindex_messages_fts")
    curs.execute("CREATE TABLE reindex_messages_fts (id BIGINT NOT NULL, tsv TSVECTOR NOT NULL)")
    last, done = -1, 0
    while True:
        rows = curs.execute(
            "SELECT f.id, m.content, CASE WHEN m.id IS NULL THEN f.tsv::text END AS tsv"
            " FROM messages_fts f"
            " LEFT JOIN messages m ON m.id = f.id WHERE f.id > %s ORDER BY f.id LIMIT %s",
            (last, REINDEX_BATCH),
        ).fetchall()
        if not rows:
            break
        with curs.copy("COPY reindex_messages_fts (id, tsv) FROM STDIN") as copy:
            for row in rows:
                mid, content, old = (
                    (row["id"], row["content"], row["tsv"]) if isinstance(row, dict) else row
                )
                if content is None:
                    tsv = old + " " + id_blocks.literal(mid)
                else:
                    tsv = row_tsvector(mid, content)
                copy.write_row((mid, tsv))
        done += len(rows)
        last = int(rows[-1]["id"] if isinstance(rows[-1], dict) else rows[-1][0])
        if progress is not None:
            progress(done)
    _swap_in(curs)
    return done


def reindex_reporting(curs: Any) -> int:
    """``reindex`` run on open (the upgrade of PostgreSQL layouts 2 to 4: layout 5 added the
    identifier lexemes, made from the text), with a line on stderr first and progress every
    few seconds for a store of ``UPGRADE_PROGRESS_MIN`` rows or more (minutes at a million
    messages). Returns the rows written."""
    from hermes_es.projections.catalog import upgrade_progress

    row = curs.execute("SELECT count(*) AS n FROM messages_fts").fetchone()
    total = int((row["n"] if isinstance(row, dict) else row[0]) or 0) if row else 0
    report = upgrade_progress(
        "re-indexing the message text for search (PostgreSQL layout 5); the index is built again",
        total,
    )
    return reindex(curs, report)


def _swap_in(curs: Any) -> None:
    """``reindex_messages_fts`` becomes ``messages_fts``, with its indexes and statistics."""
    curs.execute("DROP TABLE messages_fts")
    curs.execute("ALTER TABLE reindex_messages_fts RENAME TO messages_fts")
    curs.execute("ALTER TABLE messages_fts ADD PRIMARY KEY (id)")
    curs.execute(
        "SELECT set_config('maintenance_work_mem', GREATEST(setting::bigint, 1048576)::text"
        " || 'kB', true) FROM pg_settings WHERE name = 'maintenance_work_mem'"
    )
    for statement in PgSearchProjector().indexes():
        curs.execute(statement)
    curs.execute("ANALYZE messages_fts")


FIRST_SLICE = 2048
"""Rows of the store the first slice of a search covers (the newest ones)."""
OVERSHOOT = 1.5
"""A slice after the first is sized for this many times the matches still wanted."""
GIN_ENTRY_COST = 0.15
"""What the GIN index costs per posting of a query lexeme, against checking one row of the
table (a rough figure from EXPLAIN ANALYZE at 1,000,000 messages): a bitmap slice reads the
postings of every lexeme of the query over the whole store, a walk checks every row of its
slice. A prefix lexeme counts ``PREFIX_WEIGHT`` times (the index merges every lexeme it
covers)."""
PREFIX_WEIGHT = 4
_LEXEME = re.compile(r"'(?:[^']|'')*'(:\*)?")
BITMAP_SETTINGS = (
    "SELECT set_config('enable_indexscan', 'off', true), set_config('enable_seqscan', 'off',"
    " true), set_config('work_mem', '32MB', true)"
)
"""A bitmap slice: GIN bitmap ANDed with the id range's, exact (``work_mem`` for every page)."""
WALK_SETTINGS = (
    "SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)"
)
"""A walked slice: the primary key, newest first."""


def _slice(
    conn: Any, query: Query, lo: int | None, hi: int, limit: int, *, walk: bool
) -> list[tuple[int, float]]:
    """(id, score) of the newest ``limit`` matches with ``lo <= id <= hi`` (``lo`` None: no
    lower bound).

    ``walk``: read the primary key backwards over the slice, checking every row, until
    ``limit`` matches (for terms in a good share of the rows); else take the slice's matches
    from the GIN index's bitmap ANDed with the id range's (BRIN) bitmap, so only the pages of
    the slice's matches are read. Either way is pinned with planner settings local to the
    statement's transaction.
    """
    # In a bitmap slice the tsquery is an InitPlan parameter, so the planner does not see it
    # and, with its default estimate, ANDs the id range's bitmap with the GIN one.
    match = "tsv @@ %s::tsquery" if walk else "tsv @@ (SELECT %s::tsquery)"
    sql = f"SELECT id, tsv FROM messages_fts WHERE {match} AND id <= %s"
    params: list[object] = [query.rank, query.match, hi]
    if lo is not None:
        sql += " AND id >= %s"
        params.append(lo)
    sql += " ORDER BY id DESC LIMIT %s"
    params.append(limit)
    ranked = f"SELECT c.id, ts_rank(c.tsv, %s::tsquery) FROM ({sql}) c"
    if conn.in_transaction:  # inside the caller's transaction: the planner's own choice
        rows = conn.execute_pg(ranked, params, prepare=False).fetchall()
    else:
        with conn.pipelined_transaction([WALK_SETTINGS if walk else BITMAP_SETTINGS]):
            rows = conn.execute_pg(ranked, params, prepare=False).fetchall()
    return [(int(mid), float(score)) for mid, score in rows]


class _First(NamedTuple):
    """What the first round trip of a search learns."""

    matches: list[tuple[int, float]]
    top: int
    """The highest id below the bound (the newest row searched)."""
    low: int
    """The lowest id of the first slice."""
    bottom: int
    """The lowest id of the store."""
    rows: int
    """Rows in the first slice."""
    total: float
    """The store's rows (the planner's count)."""


def _first(
    conn: Any, query: Query, below: int | None, size: int, first_slice: int
) -> _First | None:
    """The newest ``first_slice`` rows' matches and the store's bounds, in one round trip;
    None for no rows."""
    under = "" if below is None else " WHERE id < %s"
    bound: list[object] = [] if below is None else [below]
    newest = f"SELECT id, tsv FROM messages_fts{under} ORDER BY id DESC LIMIT %s"
    facts = (
        f"SELECT max(id), min(id), count(*), (SELECT min(id) FROM messages_fts),"
        " (SELECT reltuples FROM pg_class WHERE oid = 'messages_fts'::regclass)"
        f" FROM (SELECT id FROM messages_fts{under} ORDER BY id DESC LIMIT %s) s"
    )
    found = (
        f"SELECT id, ts_rank(tsv, %s::tsquery) FROM ({newest}) s"
        " WHERE tsv @@ %s::tsquery ORDER BY id DESC LIMIT %s"
    )
    facts_params = [*bound, first_slice]
    found_params = [query.rank, *bound, first_slice, query.match, size]
    if conn.in_transaction:
        row = conn.execute_pg(facts, facts_params, prepare=False).fetchone()
        matches = conn.execute_pg(found, found_params, prepare=False).fetchall()
    else:
        with conn.pipelined_transaction() as raw:
            # Both statements go out before either result is read: one round trip.
            first = raw.cursor(row_factory=tuple_row)
            second = raw.cursor(row_factory=tuple_row)
            first.execute(facts, facts_params, prepare=False)
            second.execute(found, found_params, prepare=False)
            row = first.fetchone()
            matches = second.fetchall()
    if row is None or row[0] is None:
        return None
    top, low, rows, bottom, total = row
    return _First(
        matches=[(int(mid), float(score)) for mid, score in matches],
        top=int(top),
        low=int(low),
        bottom=int(bottom),
        rows=int(rows),
        total=float(total or 0),
    )


def _one_statement(
    conn: Any, query: Query, below: int | None, size: int
) -> list[tuple[float, int]]:
    """The newest ``size`` matches, scored, in one statement (the planner's plan)."""
    under = "" if below is None else " AND id < %s"
    rows = conn.execute_pg(
        "SELECT c.id, ts_rank(c.tsv, %s::tsquery) FROM (SELECT id, tsv FROM messages_fts"
        f" WHERE tsv @@ %s::tsquery{under} ORDER BY id DESC LIMIT %s) c",
        [query.rank, query.match, *([] if below is None else [below]), size],
        prepare=False,  # a plan for these terms' frequencies, never a generic one
    ).fetchall()
    return sorted((-float(score), int(mid)) for mid, score in rows)


def candidates(
    conn: Any,
    query: Query,
    below: int | None,
    size: int,
    *,
    first_slice: int = FIRST_SLICE,
    sliced: bool | None = SLICED,
) -> list[tuple[float, int]]:
    """(score, message id) of the ``size`` most recent matches below ``below``, best first.

    Matches are found with ``query.match`` (phrases through their pair lexemes, so the index
    reads the postings of rare lexemes only) and scored with ``query.rank``. With ``sliced``
    the matches are taken slice by slice of ids, newest first, until ``size`` are in hand or
    the slices reach the oldest row (a GIN index returns matches in no useful order: asking it
    for every match of a term in 3% of the rows reads 30,000 rows at 1,000,000 messages to
    keep 2,000):

    - the first slice walks the newest ``first_slice`` rows (a frequent word stops there), in
      the same round trip as the store's bounds;
    - each next one is sized from the matches per row seen so far to bring ``OVERSHOOT``
      times the matches still wanted (sixteen times wider when none were seen), the last one
      without a lower bound;
    - a slice is read from the GIN index's bitmap ANDed with the id range's when that is
      cheaper than walking it row by row (primary key, newest first, stopping at the matches
      still wanted): the bitmap costs ``GIN_ENTRY_COST`` per posting of the query's lexemes
      (the match rate seen, over the whole store) plus a check of every match in the slice;
      a walk costs a check of every row of the slice.

    Without ``sliced`` it is one statement, as the planner plans it (``_one_statement``).
    Only the newest ``size`` matches are scored (``ts_rank``).
    """
    if sliced is None:
        sliced = _MARKER[:2] in query.match or ":*" in query.match
    if not sliced:
        return _one_statement(conn, query, below, size)
    first = _first(conn, query, below, size, first_slice)
    if first is None:
        return []
    found = first.matches
    if len(found) >= size or first.low <= first.bottom:
        return sorted((-score, mid) for mid, score in found[:size])
    density = first.rows / max(first.top - first.low + 1, 1)
    total = first.total if first.total > 0 else density * (first.top - first.bottom + 1)
    lexemes = query.lexemes()
    seen = float(first.rows)
    hi = first.low - 1
    while True:
        rate = len(found) / seen
        wanted = size - len(found)
        rows = OVERSHOOT * wanted / rate if rate > 0 else 16 * seen
        lo: int | None = hi - int(max(rows, first_slice) / density) + 1
        if lo is not None and lo <= first.bottom:
            lo = None
        span = (hi - (first.bottom if lo is None else lo) + 1) * density
        walk = rate * (span + GIN_ENTRY_COST * lexemes * total) >= span
        found += _slice(conn, query, lo, hi, wanted, walk=walk)
        if len(found) >= size or lo is None:
            break
        seen += span
        hi = lo - 1
    found.sort(reverse=True)
    return sorted((-score, mid) for mid, score in found[:size])


BIG_STORE = 200_000
"""Rows of ``messages_fts`` at or below which ``newest_matches`` is one statement (the
planner's choice): there every plan is cheap."""
WALK_SHARE = 0.08
"""Estimated share of matching rows from which ``newest_matches`` walks the primary key
backwards (reading about ``size / share`` rows) instead of reading an id range's matches."""
RANGE_OVERSHOOT = 1.3
"""An id range is sized for this many times the matches still wanted, at the estimated (then
the seen) share of matching rows."""
MAX_RANGE_ROWS = 1_000_000
"""Most rows the first id range covers (the index reads the postings of its id blocks, a
little per row of the range); each next range may be four times as many."""
WHOLE_REST = 1.5
"""When the rows left are expected to hold at most this many times the matches still
wanted, the last range takes them all (no lower bound)."""
RANGE_SETTINGS = BITMAP_SETTINGS
"""An id range: a bitmap of the GIN index alone (the query's and the blocks' conditions)."""


def _bounds(conn: Any, below: int | None) -> tuple[int, int, float] | None:
    """(highest id below ``below``, lowest id, rows per id over the store), None when empty."""
    under = "" if below is None else " WHERE id < %s"
    row = conn.execute_pg(
        f"SELECT (SELECT max(id) FROM messages_fts{under}), (SELECT min(id) FROM messages_fts),"
        " (SELECT max(id) FROM messages_fts),"
        " (SELECT reltuples FROM pg_class WHERE oid = 'messages_fts'::regclass)",
        [] if below is None else [below],
        prepare=False,
    ).fetchone()
    if row is None or row[0] is None:
        return None
    top, bottom, high, total = int(row[0]), int(row[1]), int(row[2]), float(row[3] or 0)
    return top, bottom, total / max(high - bottom + 1, 1)


def _range(
    conn: Any, query: Query, blocks: str | None, hi: int, limit: int
) -> list[tuple[int, float]]:
    """(id, score) of the newest ``limit`` matches at or below ``hi`` among the rows of the
    id blocks ``blocks`` (a ``tsquery`` of block lexemes, ``id_blocks.cover``; None: every
    row): one GIN bitmap of both conditions, which the index intersects by skipping through
    the query's postings to the blocks' rows (``id_blocks.py``), so only the range's
    matches are read from the table. The bound on ``hi`` is a filter, not an index
    condition."""
    cond, params = query.where(planned=False)
    if blocks is not None:
        cond += " AND tsv @@ (SELECT %s::tsquery)"
        params.append(blocks)
    # Scored before the sort: a sort carrying every match's tsvector costs more than scoring
    # the few more matches a range holds than it keeps (bench/README.md).
    sql = (
        "SELECT id, ts_rank(tsv, %s::tsquery) FROM messages_fts"
        f" WHERE {cond} AND (id <= %s) IS TRUE ORDER BY id DESC LIMIT %s"
    )
    params = [query.rank, *params, hi, limit]
    if conn.in_transaction:
        rows = conn.execute_pg(sql, params, prepare=False).fetchall()
    else:
        with conn.pipelined_transaction([RANGE_SETTINGS]):
            rows = conn.execute_pg(sql, params, prepare=False).fetchall()
    return [(int(mid), float(score)) for mid, score in rows]


def _every_match(conn: Any, query: Query, below: int | None, size: int) -> list[tuple[float, int]]:
    """The newest ``size`` matches, scored, in one statement the planner plans seeing the
    terms (``Query.where``)."""
    cond, params = query.where(planned=True)
    under = "" if below is None else " AND id < %s"
    rows = conn.execute_pg(
        f"SELECT id, ts_rank(tsv, %s::tsquery) FROM messages_fts WHERE {cond}{under}"
        " ORDER BY id DESC LIMIT %s",
        [query.rank, *params, *([] if below is None else [below]), size],
        prepare=False,
    ).fetchall()
    return sorted((-float(score), int(mid)) for mid, score in rows)


def _one_lexeme(words: list[str]) -> bool:
    """Whether a prefix term of ``words`` is one prefix lexeme (``tokens.prefix_lexeme``) or
    an identifier (``tokens.is_identifier``: its prefix covers the few identifiers that start
    with it, and the statistics list the common ones)."""
    if len(words) != 1:
        return False
    return prefix_lexeme(words[0]) is not None or is_identifier(words)


def newest_matches(
    conn: Any, query: Query, below: int | None, size: int, *, big: int = BIG_STORE
) -> list[tuple[float, int]]:
    """(score, message id) of the ``size`` most recent matches below ``below``, best first:
    the work bounded by ``size``, not by how many rows match.

    A GIN index returns matches in no useful order, so "the newest 2,000 matches" of a term in
    3% of 1,000,000 rows read all 30,000 of them; walking the primary key backwards reads
    ``size / share`` rows instead, good only for frequent terms. So the share of matching rows
    is estimated from the planner's statistics (``lexeme_shares``) and

    - at ``WALK_SHARE`` or more, the primary key is walked backwards (one statement);
    - else the newest id range expected to hold ``RANGE_OVERSHOOT`` times the matches wanted
      (at most ``MAX_RANGE_ROWS`` rows, on id-block boundaries) is read as one GIN bitmap of
      the query and the range's id blocks (``_range``), so the index reads the postings inside
      the range and only the range's matches are fetched; when it holds too few, the next
      older range is sized from the share seen so far (each cap four times the one before),
      and when the rest of the store is expected to hold few more than wanted, it is read
      whole;
    - a query whose matches are all expected to be about as many as wanted, or of several
      terms together rarer than every lexeme the statistics list, is one statement over
      every match (``_every_match``); a single term the statistics do not list counts as
      their smallest share (an upper bound: a rarer one finds too few in the first range,
      and the share seen then sends it to the rest of the store, read whole).

    A query with a prefix term other than a prefix lexeme (``tokens.prefix_lexeme``) or an
    identifier (``tokens.is_identifier``) takes
    ``candidates``' slices (the statistics underestimate such a prefix). A store of ``big``
    rows or fewer, or one without statistics, is one statement (``_every_match``). The matches
    a range or the one statement reads are scored (``ts_rank``) before they are sorted: a sort
    carrying their tsvectors costs more.
    """
    bounds = _bounds(conn, below)
    if bounds is None:
        return []
    top, bottom, density = bounds
    rows_left = (top - bottom + 1) * density
    shares = lexeme_shares(conn) if rows_left > big else None
    if shares is None or not query.terms:
        return _every_match(conn, query, below, size)
    if any(prefix and not _one_lexeme(words) for words, prefix in query.terms):
        return candidates(conn, query, below, size, sliced=True)
    share = shares.query(query.terms)
    if share >= WALK_SHARE:
        found = _slice(conn, query, None, top, size, walk=True)
        return sorted((-score, mid) for mid, score in found)
    found = []
    hi, seen, grown = top, 0.0, 1.0
    while True:
        wanted = size - len(found)
        rest = (hi - bottom + 1) * density
        rows = min(RANGE_OVERSHOOT * wanted / max(share, 1e-9), grown * MAX_RANGE_ROWS)
        blocks: str | None
        blocks, lo = id_blocks.cover(max(hi - int(rows / density) + 1, bottom), hi)
        # Several terms in fewer rows than the smallest listed share: their matches together
        # are few (one term: the range, sized at that share, costs less than every match).
        few = len(query.terms) > 1 and share <= shares.least
        if few or share * rest <= WHOLE_REST * wanted or lo <= bottom:
            if not found:  # every match: the planner's own plan, seeing the terms
                return _every_match(conn, query, below, size)
            blocks = None
        found += _range(conn, query, blocks, hi, wanted)
        if len(found) >= size or blocks is None:
            break
        seen += (hi - lo + 1) * density
        share = max(len(found), 0.5) / seen
        grown *= 4
        hi = lo - 1
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
    sliced: bool | None = None,
) -> list[SearchHit]:
    """Messages matching ``query``, best ``ts_rank`` first (``where``: the caller's filters).

    The window of each round comes from ``newest_matches``; ``sliced`` True or False takes it
    from ``candidates`` instead (session 5's plans, kept for comparison)."""
    from hermes_es.queries.fts_query import parse_terms
    from hermes_es.queries.identifiers import identifier_terms
    from hermes_es.queries.search import hits_from

    search = Query.of(query)
    if search is None or limit <= 0:
        return []
    terms = identifier_terms(conn, parse_terms(query))  # the highlighter's, as on SQLite
    pool: list[tuple[float, int]] = []
    below: int | None = None
    size = window
    while True:
        if sliced is None:
            batch = newest_matches(conn, search, below, size)
        else:
            batch = candidates(conn, search, below, size, first_slice=first_slice, sliced=sliced)
        pool = sorted([*pool, *batch])
        hits = hits_from(conn, query, pool, limit, where, params, terms)
        if len(batch) < size or len(hits) >= limit:
            return hits
        below = min(mid for _, mid in batch)
        size *= 8
