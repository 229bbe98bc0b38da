"""Shared by the PostgreSQL search tests: a store of generated texts, and the reference
answer (one statement over the whole index)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hermes_es.commands.engine import SessionEngine
from hermes_es.store.postgres import search
from tests.pg_server import PgServer


@contextmanager
def analyzed_store(
    pg_server: PgServer, count: int, text: Callable[[int], str]
) -> Iterator[SessionEngine]:
    """A PostgreSQL store of ``count`` messages ``text(0) ...`` in one session, analyzed."""
    url = pg_server.database()
    eng = SessionEngine.open(url, actor="test")
    try:
        sid = eng.start_session("cli", cwd="")
        for i in range(count):
            eng.append_message(sid, "user", text(i))
        eng.store.connection().execute_pg("ANALYZE messages_fts")
        yield eng
    finally:
        eng.close()
        pg_server.drop(url)


def whole_index(conn: Any, query: str, below: int | None, size: int) -> list[tuple[float, int]]:
    """The reference: one statement over the whole index, newest ``size`` matches."""
    q = search.Query.of(query)
    assert q is not None
    sql = "SELECT id, -ts_rank(tsv, %s::tsquery) FROM messages_fts WHERE tsv @@ %s::tsquery"
    params: list[object] = [q.rank, q.match]
    if below is not None:
        sql += " AND id < %s"
        params.append(below)
    rows = conn.execute_pg(sql + " ORDER BY id DESC LIMIT %s", [*params, size]).fetchall()
    return sorted((float(score), int(mid)) for mid, score in rows)


def message_row_places(conn: Any) -> list[tuple[Any, ...]]:
    """Where every message row sits in its table (``ctid``), by id."""
    return list(conn.execute("SELECT ctid::text, id FROM messages ORDER BY id").fetchall())


def assert_reindexed_in_place(conn: Any, places_before: list[tuple[Any, ...]]) -> None:
    """After an upgrade that rewrote the search index alone: the store is at the current
    layout, ``messages_fts`` has its indexes again, and no message row moved (nothing was
    replayed)."""
    from hermes_es.store.postgres.schema import layout

    version = conn.execute("SELECT value FROM hermes_meta WHERE key = 'schema_version'").fetchone()
    assert version == (layout(),)
    indexes = conn.execute(
        "SELECT array(SELECT indexname FROM pg_indexes WHERE tablename = 'messages_fts' ORDER BY 1)"
    ).fetchone()
    assert indexes == (["messages_fts_ids", "messages_fts_pkey", "messages_fts_tsv"],)
    assert message_row_places(conn) == places_before
