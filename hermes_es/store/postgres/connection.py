"""A psycopg connection presented the way the queries and projections use an APSW connection.

The read side (queries/) and the projections are written in the SQL that SQLite and PostgreSQL
share, with ``?`` parameters and APSW's calls (``execute(sql, params).fetchall()``,
``executemany``, ``with conn:`` for a transaction, ``changes()``). ``PgConnection`` offers exactly
that over connections from eventsourcing's psycopg pool, and adapts the statement text once per
distinct statement (cached): ``?`` becomes ``%s`` (and a literal ``%`` becomes ``%%``), and the
few spellings that differ are rewritten outside string literals: ``LIKE`` is ``ILIKE`` (SQLite's
LIKE ignores ASCII case), ``instr(`` is ``strpos(``, and ``COLLATE NOCASE`` names the
case-insensitive ICU collation the schema creates. Statements that have no common spelling
(full-text search, upserts that ignore, physical delete) live in this package instead.

Outside a transaction every statement borrows a pooled connection (autocommit, like APSW's
implicit transactions); inside ``transaction()`` / ``with conn:`` every statement runs on the
one connection that holds the transaction, nested blocks being savepoints.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from eventsourcing.postgres import PostgresDatastore
from psycopg.rows import tuple_row

from hermes_es.store.postgres.errors import translated

_TOKENS = re.compile(r"'(?:[^']|'')*'|\?|%|\bLIKE\b|\binstr\(|\bCOLLATE\s+NOCASE\b", re.I)

_cache: dict[str, str] = {}


def adapt_sql(sql: str) -> str:
    """The PostgreSQL text of a statement written for both backends (cached)."""
    done = _cache.get(sql)
    if done is not None:
        return done

    def swap(match: re.Match[str]) -> str:
        token = match.group()
        if token.startswith("'"):
            return token.replace("%", "%%")
        if token == "?":
            return "%s"
        if token == "%":
            return "%%"
        upper = token.upper()
        if upper == "LIKE":
            return "ILIKE"
        if upper == "INSTR(":
            return "strpos("
        return "COLLATE nocase"

    done = _cache[sql] = _TOKENS.sub(swap, sql)
    return done


_PLAIN_INSERT = re.compile(
    r"INSERT INTO (\w+) \(([\w, ]+)\) VALUES \(\?(?:::\w+)?(?:, \?(?:::\w+)?)*\)\Z"
)
_copies: dict[str, str | None] = {}


def _copy_target(sql: str) -> str | None:
    """``COPY table (columns) FROM STDIN`` for a plain ``INSERT … VALUES (?, …)`` (no
    conflict clause, no expressions), else None. COPY reads each value with its column type's
    input function, which is what a ``?::type`` cast does."""
    if sql not in _copies:
        m = _PLAIN_INSERT.match(sql.strip())
        _copies[sql] = f"COPY {m.group(1)} ({m.group(2)}) FROM STDIN" if m else None
    return _copies[sql]


def _returns_rows(sql: str, cur: psycopg.Cursor[Any]) -> bool:
    """Whether to fetch: in pipeline mode ``description`` is unknown until a sync, so a
    statement that yields rows is recognised by its text (fetching then forces the sync)."""
    if cur.description is not None:
        return True
    head = sql.lstrip()[:6].upper()
    return head in ("SELECT", "WITH", "VALUES", "PRAGMA") or " RETURNING " in sql.upper()


class PgCursor:
    """The rows of one executed statement (fetched eagerly, so the connection is free again)."""

    def __init__(self, rows: list[tuple[Any, ...]], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Every row."""
        return self._rows

    def fetchone(self) -> tuple[Any, ...] | None:
        """The first row, or None."""
        return self._rows[0] if self._rows else None

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._rows)


class PgConnection:
    """One thread's view of the database (see the module docstring)."""

    backend = "postgresql"

    def __init__(
        self, datastore: PostgresDatastore, *, on_close: Callable[[], None] | None = None
    ) -> None:
        self.datastore = datastore
        self._on_close = on_close
        self._local = threading.local()
        self._changes = 0

    # -- the connection holding this thread's transaction ------------------------------------

    @property
    def raw(self) -> psycopg.Connection[Any] | None:
        """The psycopg connection holding the open transaction (None outside one)."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        return conn

    @property
    def in_transaction(self) -> bool:
        """True inside ``transaction()``."""
        return self.raw is not None

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """BEGIN … COMMIT on a pooled connection (a savepoint when one is already open)."""
        held = self.raw
        if held is not None:
            with translated(), held.transaction():
                yield held
            return
        with translated(), self.datastore.get_connection() as conn:
            self._local.conn = conn
            try:
                with conn.transaction():
                    yield conn
            finally:
                self._local.conn = None

    @contextmanager
    def pipelined_transaction(
        self, opening: Sequence[Any] = ()
    ) -> Iterator[psycopg.Connection[Any]]:
        """BEGIN … COMMIT on a pooled connection in pipeline mode (outside any transaction).

        Nothing is sent until a statement's rows are read: ``BEGIN``, the ``opening``
        statements (their results are not read) and the first read go to the server in one
        round trip, and the writes that follow the last read go with ``COMMIT`` in one more.
        A statement that fails makes the next read (or the commit) raise, and the
        transaction is rolled back.
        """
        assert self.raw is None, "pipelined_transaction opens the outermost transaction"
        with translated(), self.datastore.get_connection() as conn:
            self._local.conn = conn
            try:
                with conn.pipeline(), psycopg.Transaction(conn):
                    with conn.cursor() as curs:
                        for statement in opening:
                            curs.execute(statement)
                    yield conn
            except BaseException:
                # A failure reported by the final sync leaves the transaction aborted
                # (the queued COMMIT was skipped): end it before the pool takes it back.
                if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    conn.rollback()
                raise
            finally:
                self._local.conn = None

    def __enter__(self) -> PgConnection:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        cm = self.transaction()
        cm.__enter__()
        stack.append(cm)
        return self

    def __exit__(self, *exc: Any) -> bool:
        cm = self._local.stack.pop()
        return bool(cm.__exit__(*exc))

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        held = self.raw
        if held is not None:
            yield held
            return
        with translated(), self.datastore.get_connection() as conn:
            yield conn

    # -- statements ---------------------------------------------------------------------------

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> PgCursor:
        """Run one statement; its rows are fetched at once."""
        with self._conn() as conn, translated():
            cur = conn.cursor(row_factory=tuple_row)
            cur.execute(adapt_sql(sql), tuple(params or ()))
            rows = list(cur.fetchall()) if _returns_rows(sql, cur) else []
            self._changes = max(cur.rowcount, 0)
            return PgCursor(rows, self._changes)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement for each parameter row."""
        batch = [tuple(r) for r in rows]
        if not batch:
            return
        with self._conn() as conn, translated():
            cur = conn.cursor()
            pipelined = conn.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF
            copy = _copy_target(sql) if len(batch) > 1 and not pipelined else None
            if copy is not None:  # many plain inserts: one COPY instead of a round trip each
                with cur.copy(copy) as out:
                    for row in batch:
                        out.write_row(row)
            elif len(batch) == 1:  # one row: a plain execute saves executemany's pipeline sync
                cur.execute(adapt_sql(sql), batch[0])
            else:
                cur.executemany(adapt_sql(sql), batch)
            self._changes = max(cur.rowcount, 0)

    def execute_pg(self, sql: str, params: Sequence[Any] | None = None) -> PgCursor:
        """Run a statement written for PostgreSQL (``%s`` parameters, no adaptation)."""
        with self._conn() as conn, translated():
            cur = conn.cursor(row_factory=tuple_row)
            cur.execute(sql, params)
            rows = list(cur.fetchall()) if _returns_rows(sql, cur) else []
            self._changes = max(cur.rowcount, 0)
            return PgCursor(rows, self._changes)

    def changes(self) -> int:
        """Rows changed by the last statement."""
        return self._changes

    def close(self) -> None:
        """Close the store this connection belongs to (its pool), when it was handed out alone."""
        if self._on_close is not None:
            self._on_close()

    # -- search -------------------------------------------------------------------------------

    def fts5_tokenizer(self, name: str, args: Sequence[str]) -> Any:
        """The ``hermes`` tokenizer (snippets are cut with the same one as on SQLite)."""
        from hermes_es.store.postgres.tokens import host

        return host().fts5_tokenizer(name, list(args))

    def search_messages(
        self, query: str, *, limit: int, where: str, params: list[object]
    ) -> list[Any]:
        """Full-text search over the tsvector index (``where``: the caller's filters)."""
        from hermes_es.store.postgres.search import search_messages

        return search_messages(self, query, limit=limit, where=where, params=params)
