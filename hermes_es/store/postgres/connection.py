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

Inside ``pipelined_transaction`` (the engine's write transactions) plain writes are held back
and sent together (``WriteGroup``): consecutive ``INSERT … VALUES``, ``UPDATE`` and ``DELETE``
statements on distinct tables become one statement (a ``WITH`` of data-modifying parts), sent
before the next read, savepoint or ``COMMIT``. A message append's event row, message row,
index row, session row and tracking row thus reach the server as one statement.
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
_many: dict[tuple[str, int], str] = {}

MAX_GROUP_PARAMS = 30_000
"""Parameters one held statement may carry (the protocol's limit is 65,535): a write with
more rows runs on its own (``executemany``), and a group that would exceed it is sent first."""


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


_WRITE = re.compile(
    r"(?:(INSERT INTO (\w+) \([\w, ]+\) VALUES )(\(%s(?:::\w+)?(?:, %s(?:::\w+)?)*\))"
    r"((?: ON CONFLICT .*)?)|UPDATE (\w+) SET .*|DELETE FROM (\w+) WHERE .*)\Z",
    re.S,
)
_READS = re.compile(r"\b(?:SELECT|RETURNING|WITH)\b", re.I)
_writes: dict[str, tuple[str, str, str, str] | None] = {}


def write_shape(pg_sql: str) -> tuple[str, str, str, str] | None:
    """``(table, head, row, tail)`` of a plain write another can share a statement with, else
    None (cached). ``head + row + tail`` is the statement; for an ``INSERT … VALUES`` whose
    rows may go out as one multi-row ``VALUES`` (no conflict clause, or ``DO NOTHING``),
    ``row`` is its ``(%s, …)`` (else ``""``). A statement that reads another table (a
    subquery) or returns rows is never shared: its effects or rows are wanted in order."""
    if pg_sql in _writes:
        return _writes[pg_sql]
    shape: tuple[str, str, str, str] | None = None
    m = _WRITE.match(pg_sql.strip())
    if m is not None and _READS.search(pg_sql) is None:
        if m.group(2):
            tail = m.group(4)
            if tail and not tail.rstrip().upper().endswith("DO NOTHING"):
                shape = (m.group(2), pg_sql.strip(), "", "")
            else:
                shape = (m.group(2), m.group(1), m.group(3), tail)
        else:
            shape = (m.group(5) or m.group(6), pg_sql.strip(), "", "")
    _writes[pg_sql] = shape
    return shape


class WriteGroup:
    """Writes held back to go to the server as one statement.

    Parts on distinct tables share one ``WITH w0 AS (…), w1 AS (…) SELECT …``: PostgreSQL runs
    every data-modifying part exactly once, all on the statement's snapshot. That is the same
    as running them one after another only when no part reads what another writes, hence:
    a part on a table the group already writes starts a new group (so an ``UPDATE`` after an
    ``INSERT`` into the same table sees it), and only plain writes join (``write_shape``).
    ``selects`` are expressions for the statement's final ``SELECT`` (``pg_notify``,
    ``setval``), run after the parts.
    """

    __slots__ = ("params", "parts", "select_params", "selects", "tables")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.params: list[Any] = []
        self.selects: list[str] = []
        self.select_params: list[Any] = []
        self.tables: set[str] = set()

    def statement(self) -> tuple[str, list[Any]] | None:
        """The one statement (and its parameters) that does every held write; None if none."""
        parts, selects = self.parts, self.selects
        if not parts and not selects:
            return None
        key = (tuple(parts), tuple(selects))
        sql = _statements.get(key)
        if sql is None:
            if len(parts) == 1 and not selects:
                sql = parts[0]
            else:
                with_ = ", ".join(f"w{i} AS ({p})" for i, p in enumerate(parts))
                final = "SELECT " + (", ".join(selects) if selects else "1")
                sql = f"WITH {with_} {final}" if parts else final
            if len(_statements) > 512:
                _statements.clear()
            _statements[key] = sql
        return sql, self.params + self.select_params if self.select_params else self.params


_statements: dict[tuple[tuple[str, ...], tuple[str, ...]], str] = {}


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
            self.send_writes()  # held writes belong before the savepoint
            pipeline: psycopg.Pipeline | None = getattr(self._local, "pipeline", None)
            if pipeline is not None:
                # psycopg tells a savepoint from a new transaction by the server's
                # transaction status, which a pipeline only learns at a sync.
                with translated():
                    pipeline.sync()
            with translated(), held.transaction():
                try:
                    yield held
                except BaseException:
                    self._local.group = WriteGroup() if self.holding_writes else None
                    raise
                self.send_writes()
            return
        with translated(), self.datastore.get_connection() as conn:
            self._local.conn = conn
            try:
                with conn.transaction():
                    yield conn
            finally:
                self._local.conn = None

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """Reads that agree with each other: one ``REPEATABLE READ`` transaction on a pooled
        connection, every statement inside on its snapshot (what ``store.db.read_transaction``
        is on SQLite: one WAL snapshot). Inside an open transaction, that one."""
        if self.raw is not None:
            yield
            return
        with translated(), self.datastore.get_connection() as conn:
            self._local.conn = conn
            try:
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    yield
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
            self._local.group = WriteGroup()
            self._local.opened = None
            self._local.next_id = None
            try:
                with conn.pipeline() as pipeline:
                    with psycopg.Transaction(conn):
                        self._local.pipeline = pipeline
                        curs = conn.cursor(row_factory=tuple_row)
                        for statement in opening:
                            curs.execute(statement)
                        self._local.opened = curs
                        yield conn
                        self.send_writes()
                    # The COMMIT is only queued: sync here, so the first failure is what
                    # raises. Left to the pipeline's exit, a failure whose result arrived
                    # early is replaced by the "pipeline aborted" of the skipped COMMIT.
                    pipeline.sync()
            except BaseException:
                # A failure reported by the final sync leaves the transaction aborted
                # (the queued COMMIT was skipped): end it before the pool takes it back.
                if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    conn.rollback()
                raise
            finally:
                self._local.conn = None
                self._local.group = None
                self._local.opened = None
                self._local.pipeline = None

    @property
    def holding_writes(self) -> bool:
        """True inside ``pipelined_transaction``: plain writes are held back and grouped."""
        return getattr(self._local, "group", None) is not None

    def opening_row(self) -> tuple[Any, ...] | None:
        """The row the last opening statement of ``pipelined_transaction`` returned (read
        when first asked for; after the transaction's first read that costs no round trip)."""
        curs: psycopg.Cursor[Any] | None = getattr(self._local, "opened", None)
        if curs is None:
            return None
        row: tuple[Any, ...] | None = curs.fetchone()
        self._local.opened = None
        return row

    def take_positions(self, count: int) -> list[int] | None:
        """The next ``count`` notification ids this transaction's events get, when known:
        the opening statement returned the first free one under the writers' lock (see
        ``schema.write_lock_ddl``); None otherwise (the events must then be inserted with
        the ids read back)."""
        first: int | None = getattr(self._local, "next_id", None)
        if first is None:
            if not self.holding_writes:
                return None
            row = self.opening_row()
            if row is None or row[0] is None:
                return None
            first = int(row[0])
        self._local.next_id = first + count
        return list(range(first, first + count))

    def positions_taken(self, ids: Sequence[int]) -> None:
        """Events got ``ids`` from the sequence itself: later ones in this transaction follow."""
        if ids and self.holding_writes:
            self._local.opened = None
            self._local.next_id = max(ids) + 1

    def hold_write(self, table: str, part: str, params: Sequence[Any]) -> None:
        """Add one write (PostgreSQL text) to the held group (see ``WriteGroup``)."""
        group: WriteGroup = self._local.group
        if table in group.tables or len(group.params) + len(params) > MAX_GROUP_PARAMS:
            self.send_writes()
            group = self._local.group
        group.tables.add(table)
        group.parts.append(part)
        group.params.extend(params)

    def hold_select(self, expression: str, params: Sequence[Any]) -> None:
        """Add an expression to the final ``SELECT`` of the held group's statement."""
        group: WriteGroup = self._local.group
        group.selects.append(expression)
        group.select_params.extend(params)

    def send_writes(self) -> None:
        """Send the held writes as one statement (pipelined: its errors surface at the next
        sync, at the latest with ``COMMIT``)."""
        group: WriteGroup | None = getattr(self._local, "group", None)
        if group is None:
            return
        statement = group.statement()
        if statement is None:
            return
        self._local.group = WriteGroup()
        conn = self.raw
        assert conn is not None
        with translated():
            conn.cursor().execute(statement[0], statement[1])

    def _hold(self, sql: str, batch: Sequence[Sequence[Any]]) -> bool:
        """Hold ``sql`` run once per row of ``batch`` when it is a plain write; False when
        it must run now (after the held writes)."""
        shape = write_shape(sql)
        if shape is None:
            self.send_writes()
            return False
        table, head, row, tail = shape
        if len(batch) * len(batch[0]) > MAX_GROUP_PARAMS:
            self.send_writes()
            return False
        if len(batch) == 1 or not row:
            statement = head + row + tail
            for params in batch:
                self.hold_write(table, statement, params)
            return True
        key = (sql, len(batch))
        text = _many.get(key)
        if text is None:
            if len(_many) > 512:
                _many.clear()
            text = _many[key] = head + ", ".join([row] * len(batch)) + tail
        self.hold_write(table, text, [v for params in batch for v in params])
        return True

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
        if getattr(self._local, "group", None) is not None:
            pg_sql = adapt_sql(sql)
            if self._hold(pg_sql, (tuple(params or ()),)):
                return PgCursor([], 0)
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
        if getattr(self._local, "group", None) is not None and self._hold(adapt_sql(sql), batch):
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

    def execute_pg(
        self, sql: str, params: Sequence[Any] | None = None, *, prepare: bool | None = None
    ) -> PgCursor:
        """Run a statement written for PostgreSQL (``%s`` parameters, no adaptation).

        ``prepare=False``: never as a prepared statement (psycopg prepares a statement run five
        times, and the server may then plan it once for every parameter value: a search's
        plan depends on how frequent its terms are)."""
        self.send_writes()
        with self._conn() as conn, translated():
            cur = conn.cursor(row_factory=tuple_row)
            cur.execute(sql, params, prepare=prepare)
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
