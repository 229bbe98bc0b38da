"""Full-text search over messages: bm25 ranking and highlighted snippets."""

from __future__ import annotations

from collections.abc import Sequence

import apsw
import msgspec

from hermes_es.queries.fts_query import build_match

SNIPPET_OPEN = "\x02"
SNIPPET_CLOSE = "\x03"


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


def search_messages(
    conn: apsw.Connection,
    query: str,
    *,
    limit: int = 20,
    sources: Sequence[str] | None = None,
    roles: Sequence[str] | None = None,
    exclude_sources: Sequence[str] = (),
) -> list[SearchHit]:
    """Messages matching ``query`` (any text is safe), best bm25 first."""
    match = build_match(query)
    if match is None or limit <= 0:
        return []
    sql = (
        "SELECT m.session_id, m.seq, m.role,"
        f" snippet(messages_fts, 0, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}', '…', 16),"
        " bm25(messages_fts), m.at, s.source, s.title, s.root_id, m.state"
        " FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
        " JOIN sessions s ON s.id = m.session_id"
        " WHERE messages_fts MATCH ? AND m.state IN ('active', 'compacted')"
    )
    params: list[object] = [match]
    if sources:
        sql += f" AND s.source IN ({','.join('?' * len(sources))})"
        params.extend(sources)
    if exclude_sources:
        sql += f" AND s.source NOT IN ({','.join('?' * len(exclude_sources))})"
        params.extend(exclude_sources)
    if roles:
        sql += f" AND m.role IN ({','.join('?' * len(roles))})"
        params.extend(roles)
    sql += " ORDER BY bm25(messages_fts) LIMIT ?"
    params.append(limit)
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
        )
        for r in conn.execute(sql, params)
    ]
