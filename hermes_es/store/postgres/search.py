"""Full-text search on PostgreSQL: ``tsvector`` + GIN for words and phrases, ``pg_trgm`` for CJK.

The query language is SQLite's (``queries/fts_query.py``): whitespace-separated terms, all
required; double quotes keep a phrase; a trailing ``*`` makes a prefix; punctuation inside a
term (``chat-send``, ``P2.2``, emails, URLs) is never syntax. Both backends split text with the
same ``hermes`` tokenizer (``tokens.py``), so a term matches the same messages on both:

- ``messages_fts (id, tsv)`` holds each message's tokens with positions; a term is a
  ``tsquery`` phrase of its tokens (``'chat' <-> 'send'``), a prefix term ends in ``:*``
  (PostgreSQL's GIN index answers prefix lexemes itself), every term ANDed.
- A trigram index (``pg_trgm``) over ``messages.content`` narrows CJK terms: a CJK run of
  three or more characters must appear verbatim in the message, and single CJK characters
  are the least selective lexemes of the tsvector index.

Ranking is ``ts_rank`` over the most recent ``window`` matches (the same bounded plan as on
SQLite: ``ORDER BY id DESC LIMIT window``, widening while filters leave too few hits);
snippets are cut by the same highlighter as on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hermes_es.aggregates.state import SessionState
from hermes_es.aggregates.validation import content_text
from hermes_es.projections.base import Change, message_row_id
from hermes_es.projections.search import new_messages
from hermes_es.store.postgres.connection import adapt_sql
from hermes_es.store.postgres.tokens import substrings, tsquery_text, tsvector_literal

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
        """GIN over the tokens; trigrams over the message text."""
        return [
            "CREATE INDEX IF NOT EXISTS messages_fts_tsv ON messages_fts USING gin (tsv)",
            "CREATE INDEX IF NOT EXISTS messages_trgm ON messages USING gin (content gin_trgm_ops)",
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


def _like(run: str) -> str:
    return "%" + run.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def page_sql(cjk: int, below: bool, where: str) -> str:
    """One page in one statement: the ``size`` most recent matches below ``below`` (the
    bounded window), how many there were and the oldest id among them, and, of those passing
    the caller's filters (``where``, in the shared spelling), the best ``limit`` by
    ``ts_rank`` with the columns a hit shows."""
    window = "SELECT f.id, f.tsv FROM messages_fts f"
    if cjk:
        window += " JOIN messages mc ON mc.id = f.id"
    window += " WHERE f.tsv @@ %s::tsquery" + " AND mc.content ILIKE %s" * cjk
    if below:
        window += " AND f.id < %s"
    window += " ORDER BY f.id DESC LIMIT %s"
    return (
        f"WITH c AS MATERIALIZED ({window}),"
        " page AS (SELECT count(*) AS n, min(id) AS low FROM c)"
        " SELECT page.n, page.low, r.* FROM page LEFT JOIN LATERAL ("
        " SELECT c.id, -ts_rank(c.tsv, %s::tsquery) AS score, m.session_id, m.seq, m.role,"
        " m.at, s.source, s.title, s.root_id, m.state, m.ord, m.content"
        " FROM c JOIN messages m ON m.id = c.id JOIN sessions s ON s.id = m.session_id"
        f" WHERE TRUE{adapt_sql(where)} ORDER BY score, c.id LIMIT %s) r ON TRUE"
    )


def search_messages(
    conn: Any,
    query: str,
    *,
    limit: int,
    where: str,
    params: list[object],
    window: int = CANDIDATE_WINDOW,
) -> list[SearchHit]:
    """Messages matching ``query``, best ``ts_rank`` first (``where``: the caller's filters)."""
    from hermes_es.queries.search import SearchHit
    from hermes_es.queries.snippets import Highlighter

    tsquery = tsquery_text(query)
    if tsquery is None or limit <= 0:
        return []
    cjk = [_like(run) for run in substrings(query)]
    best: list[tuple[Any, ...]] = []
    below: int | None = None
    size = window
    while True:
        args: list[object] = [tsquery, *cjk]
        if below is not None:
            args.append(below)
        args += [size, tsquery, *params, limit]
        rows = conn.execute_pg(page_sql(len(cjk), below is not None, where), args).fetchall()
        found, low = int(rows[0][0]), rows[0][1]
        page = [r[2:] for r in rows if r[2] is not None]
        best = sorted([*best, *page], key=lambda r: (float(r[1]), int(r[0])))[:limit]
        if found < size or len(best) >= limit:
            break
        below = int(low)
        size *= 8
    marker = Highlighter(conn, query)  # snippets for the returned hits only
    return [
        SearchHit(
            session_id=r[2],
            seq=r[3],
            role=r[4],
            snippet=marker.snippet(str(r[11])),
            score=float(r[1]),
            at=r[5],
            source=r[6],
            title=r[7],
            root_id=r[8],
            state=r[9],
            message_id=int(r[0]),
            ord=r[10],
        )
        for r in best
    ]
