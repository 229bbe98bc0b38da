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


def candidates(
    conn: Any, tsquery: str, cjk: Sequence[str], below: int | None, size: int
) -> list[tuple[float, int]]:
    """(score, message id) of the ``size`` most recent matches below ``below``, best first."""
    phrase = "<->" in tsquery
    sql = "SELECT f.id FROM messages_fts f" if phrase else "SELECT f.id, f.tsv FROM messages_fts f"
    params: list[object] = [tsquery]
    if cjk:
        sql += " JOIN messages m ON m.id = f.id"
    sql += " WHERE f.tsv @@ %s::tsquery"
    for run in cjk:
        sql += " AND m.content ILIKE %s"
        params.append("%" + run.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
    if below is not None:
        sql += " AND f.id < %s"
        params.append(below)
    sql += " ORDER BY f.id DESC LIMIT %s"
    params.append(size)
    if phrase:
        # Phrases (identifiers, CJK words) are checked against every match's positions, so
        # the window comes from a bitmap scan of all matches: it is chosen on ids alone (with
        # the tsvectors along, that sort spilled to disk at 1,000,000 messages), and only the
        # window's tsvectors are read back for ts_rank. Words keep the plain form, which a
        # backward scan of the primary key answers after ``size`` matches.
        ranked = (
            f"SELECT c.id, -ts_rank(c.tsv, %s::tsquery) FROM messages_fts c WHERE c.id IN ({sql})"
        )
    else:
        ranked = f"SELECT c.id, -ts_rank(c.tsv, %s::tsquery) FROM ({sql}) c"
    rows = conn.execute_pg(ranked, [tsquery, *params]).fetchall()
    return sorted((float(score), int(mid)) for mid, score in rows)


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
    from hermes_es.queries.search import hits_from

    tsquery = tsquery_text(query)
    if tsquery is None or limit <= 0:
        return []
    cjk = substrings(query)
    pool: list[tuple[float, int]] = []
    below: int | None = None
    size = window
    while True:
        batch = candidates(conn, tsquery, cjk, below, size)
        pool = sorted([*pool, *batch])
        hits = hits_from(conn, query, pool, limit, where, params)
        if len(batch) < size or len(hits) >= limit:
            return hits
        below = min(mid for _, mid in batch)
        size *= 8
