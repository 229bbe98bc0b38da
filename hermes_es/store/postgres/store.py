"""The write side on PostgreSQL: events and every projection in one PostgreSQL transaction.

The log is eventsourcing's ``PostgresApplicationRecorder`` (table ``events``). A write
transaction first takes the same ``EXCLUSIVE`` lock on ``events`` that the recorder takes to
keep notification ids in commit order, so writers are serialized from the start, exactly like
SQLite's ``BEGIN IMMEDIATE``: a command reads the heads it decides on under the lock, a stale
expected version is a ``ConflictError``, and a retried uid is found by the read. Reads never
wait for it (``EXCLUSIVE`` lets ``SELECT`` through).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import msgspec
import psycopg
from eventsourcing.persistence import (
    IntegrityError,
    OperationalError,
    PersistenceError,
    ProgrammingError,
    StoredEvent,
)
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresDatastore,
)
from psycopg.conninfo import conninfo_to_dict
from psycopg.sql import SQL, Identifier, Literal
from psycopg_pool import PoolTimeout

from hermes_es.commands.unit_of_work import Batch
from hermes_es.errors import ConfigError, ConflictError, StoreBusyError, StoreError
from hermes_es.store.backend import redact_url
from hermes_es.store.codec import pack
from hermes_es.store.postgres.connection import MAX_GROUP_PARAMS, PgConnection
from hermes_es.store.postgres.projections import PgProjectionSet
from hermes_es.store.postgres.schema import (
    EVENTS_TABLE,
    WRITE_LOCK_FUNCTION,
    ensure_schema,
)
from hermes_es.store.scrub import PendingScrub

SCRUB_TABLES = ("events", "messages", "messages_fts", "sessions", "lineage", "prompts")
"""Tables a delete removes rows from (``deletions`` only gains a receipt)."""
SCRUB_LOCK_TIMEOUT = "2s"
SCRUB_PENDING_KEY = "scrub_pending"
"""``hermes_meta`` key of a delete's blocked scrub (JSON: ``since``, ``reason``)."""

LOCK_TIMEOUT_S = 30
"""How long a writer waits for another writer's lock (seconds), like SQLite's busy timeout."""
CONNECT_TIMEOUT_S = 5
"""How long opening a connection may take (seconds) when the URL sets no ``connect_timeout``."""
APPLICATION_NAME = "hermes"
"""``application_name`` of hermes' connections (what ``pg_stat_activity`` shows) unless the
URL sets one."""


def datastore_for(url: str, *, pool_size: int = 2, max_overflow: int = 8) -> PostgresDatastore:
    """eventsourcing's datastore (a psycopg pool) for a ``postgresql://`` URL."""
    try:
        info = conninfo_to_dict(url)
    except Exception as exc:
        raise ConfigError(
            f"store URL {redact_url(url)!r} is not a valid PostgreSQL URL: {_one_line(str(exc))}",
            subject=redact_url(url),
        ) from exc
    dbname = str(info.pop("dbname", "") or "")
    if not dbname:
        raise ConfigError(
            f"store URL {redact_url(url)!r} names no database (postgresql://user@host/DBNAME)",
            subject=redact_url(url),
        )
    port = str(info.pop("port", "") or "5432")
    if not all(not p or (p.isdigit() and 0 < int(p) < 65536) for p in port.split(",")):
        raise ConfigError(
            f"store URL {redact_url(url)!r}: port {port!r} is not a port number (1 to 65535)",
            subject=redact_url(url),
        )
    timeout = str(info.pop("connect_timeout", "") or CONNECT_TIMEOUT_S)
    try:
        connect_timeout = float(timeout)
    except ValueError:
        connect_timeout = -1.0
    if not connect_timeout > 0:
        raise ConfigError(
            f"store URL {redact_url(url)!r}: connect_timeout={timeout!r} is not a positive"
            " number of seconds",
            subject=redact_url(url),
        )
    datastore = PostgresDatastore(
        dbname,
        str(info.pop("host", "") or "127.0.0.1"),
        port,
        str(info.pop("user", "") or "postgres"),
        str(info.pop("password", "") or ""),
        connect_timeout=connect_timeout,
        pool_size=pool_size,
        max_overflow=max_overflow,
        lock_timeout=LOCK_TIMEOUT_S,
        originator_id_type="text",
    )
    # Every other libpq parameter of the URL (sslmode, sslrootcert, application_name,
    # options, target_session_attrs, …) goes to each pooled connection as given; the pool
    # itself passes connect_timeout (the value above) to every connect.
    info.setdefault("application_name", APPLICATION_NAME)
    kwargs = cast(dict[str, Any], datastore.pool.kwargs)
    kwargs.update(info)
    return datastore


def _one_line(text: str) -> str:
    """A server or libpq message on one line, any URL in it without its password."""
    return redact_url(" ".join(text.split()))


def connect_failure(datastore: PostgresDatastore, exc: BaseException) -> str | None:
    """Why no connection could be had, when ``exc`` is the pool giving up; else None.

    The pool retries failed connects in the background until its timeout and then reports
    only that it got none ("couldn't get a connection after 5.00 sec"), whatever the cause: a
    wrong password, a database that does not exist, a refused port, an unknown host. One
    direct connect with the pool's own parameters says which.
    """
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, PoolTimeout):
        cause = cause.__cause__
    if cause is None:
        return None
    pool = datastore.pool
    kwargs = {k: v for k, v in cast(dict[str, Any], pool.kwargs).items() if k != "row_factory"}
    kwargs["connect_timeout"] = max(round(pool.timeout), 1)
    try:
        psycopg.connect(str(pool.conninfo or ""), **kwargs).close()
    except psycopg.Error as found:
        return _one_line(str(found)).removeprefix("connection failed: ")
    return None


@contextmanager
def probe(location: str, datastore: PostgresDatastore) -> Iterator[None]:
    """Turn a failure to open the store into a ``StoreError`` naming the store and the cause:
    "could not reach" for a connection the server refused or never answered, "could not
    open" for a statement it refused (the store is not created)."""
    try:
        yield
    except PersistenceError as exc:
        reason = connect_failure(datastore, exc)
        if reason is not None or isinstance(exc, OperationalError):
            raise StoreError(
                f"could not reach the store at {location}: {reason or _one_line(str(exc))}",
                subject=location,
            ) from exc
        raise StoreError(
            f"could not open the store at {location}: {_one_line(str(exc))}; nothing was changed",
            subject=location,
        ) from exc


class PgEventLog:
    """The recorder's insert, run on the connection holding the engine's transaction."""

    def __init__(self, recorder: PostgresApplicationRecorder, sequence: str) -> None:
        self.recorder = recorder
        table = f"{Identifier(recorder.datastore.schema).as_string()}.{EVENTS_TABLE}"
        self._insert = (
            f"INSERT INTO {table}"
            " (notification_id, originator_id, originator_version, topic, state) VALUES "
        )
        self._notify = (
            f"pg_notify({Literal(recorder.channel_name).as_string()}, ''),"
            f" setval({Literal(sequence).as_string()}, %s)"
        )
        self._rows: dict[int, str] = {}

    def _insert_events(self, conn: Any, stored_events: Sequence[StoredEvent]) -> list[int]:
        """Insert events (the table lock is already held); returns their notification ids.

        In the engine's write transaction the ids are known before the insert (the first
        free one came back with the lock, ``PgConnection.take_positions``): the rows, with
        those ids, join the held writes, and the same statement moves the log's sequence
        past them (``setval``) and queues the ``NOTIFY`` the recorder sends. Otherwise the
        recorder's own ``NOTIFY`` and insert run, and the ids are read back.
        """
        pg = cast(PgConnection, conn)
        many = len(stored_events) * 5 > MAX_GROUP_PARAMS  # a long copy: the recorder's insert
        positions = None if many else pg.take_positions(len(stored_events))
        if positions is not None:
            params: list[Any] = []
            for p, s in zip(positions, stored_events, strict=True):
                params += (p, s.originator_id, s.originator_version, s.topic, pack(s.state))
            n = len(positions)
            rows = self._rows.get(n)
            if rows is None:
                rows = self._rows[n] = ", ".join(["(%s, %s, %s, %s, %s)"] * n)
            pg.hold_write(EVENTS_TABLE, self._insert + rows, params)
            pg.hold_select(self._notify, (positions[-1],))
            return positions
        pg.send_writes()
        raw = pg.raw
        assert raw is not None, "events are inserted inside a transaction"
        packed = [  # the stored form SQLite uses too (zstd with the shipped dictionary)
            StoredEvent(
                originator_id=s.originator_id,
                originator_version=s.originator_version,
                topic=s.topic,
                state=pack(s.state),
            )
            for s in stored_events
        ]
        with raw.cursor() as curs:
            # The transaction took the recorder's table lock when it began, so only the
            # recorder's NOTIFY and INSERT remain (its lock statements would repeat it).
            self.recorder._notify_channel(curs)
            PostgresAggregateRecorder._insert_stored_events(self.recorder, curs, packed)
            # Fetching the RETURNING rows forces a sync when the transaction is pipelined.
            ids = [int(row["notification_id"]) for row in curs.fetchall()]
        if len(ids) != len(packed):
            raise ProgrammingError(f"got {len(ids)} notification ids for {len(packed)} events")
        pg.positions_taken(ids)
        return ids

    def _delete_events(self, conn: Any, originator_id: str) -> int:
        """Physically remove a stream's events; returns how many went."""
        # Counted from RETURNING rows: in a pipelined transaction a row count is only known
        # once results are read.
        cur = cast(PgConnection, conn).execute(
            "DELETE FROM events WHERE originator_id = ? RETURNING 1", (originator_id,)
        )
        return len(cur.fetchall())


class PgStore:
    """The event log and its projections in one PostgreSQL database."""

    def __init__(self, url: str, *, clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self.location = redact_url(url)
        self.clock = clock
        self.datastore = datastore_for(url)
        self.projections = PgProjectionSet()
        self.path = Path(self.location)
        self._conn = PgConnection(self.datastore, on_close=self.close)
        try:
            with probe(self.location, self.datastore):
                self.pg_recorder = PostgresApplicationRecorder(
                    self.datastore, events_table_name=EVENTS_TABLE
                )
                sequence = ensure_schema(self.datastore, self.pg_recorder)
        except BaseException:
            self.datastore.close()
            raise
        self.recorder = PgEventLog(self.pg_recorder, sequence)
        self.write_opening = [f"SELECT {WRITE_LOCK_FUNCTION}({LOCK_TIMEOUT_S})"]
        """What a write transaction starts with: the writers' lock, returning the first free
        notification id (``schema.write_lock_ddl``)."""
        self.lock_statements = [
            SQL("SET LOCAL lock_timeout = '{0}s'").format(LOCK_TIMEOUT_S),
            SQL("LOCK TABLE {0}.{1} IN EXCLUSIVE MODE").format(
                Identifier(self.datastore.schema), Identifier(EVENTS_TABLE)
            ),
        ]
        """The recorder's own lock statements (queued with BEGIN, see ``transaction``)."""

    def connection(self) -> Any:
        """The connection adapter the queries use (statements borrow pooled connections)."""
        return self._conn

    @contextmanager
    def errors(self, doing: str) -> Iterator[None]:
        """Translate persistence errors into the engine's own, naming the store."""
        try:
            yield
        except IntegrityError as exc:
            raise ConflictError.lost_race(exc) from exc
        except OperationalError as exc:
            text = str(exc)
            if "busy" in text or "lock" in text:
                raise StoreBusyError(
                    f"{self.location} stayed locked by another writer for {LOCK_TIMEOUT_S} s;"
                    " nothing was changed; try again",
                    subject=self.location,
                ) from exc
            reason = connect_failure(self.datastore, exc) or _one_line(text)
            raise StoreError(
                f"could not {doing} the store at {self.location}: {reason}",
                subject=self.location,
            ) from exc
        except PersistenceError as exc:
            raise StoreError(
                f"could not {doing} the store at {self.location}: {str(exc).strip()};"
                " nothing was changed",
                subject=self.location,
            ) from exc

    @contextmanager
    def transaction(self) -> Iterator[Batch]:
        """A serialized write transaction with a batch collecting the events to store."""
        conn = self._conn
        with self.errors("write"):
            if conn.in_transaction:
                with conn.transaction():
                    batch = Batch(cast(Any, self), cast(Any, conn))
                    yield batch
                    batch.flush()
                return
            # Pipelined: BEGIN, the writers' lock (returning the first free notification id)
            # and the first head read share one round trip; the events and every projection
            # write, as one statement (``PgConnection.hold_write``), and COMMIT the other.
            with conn.pipelined_transaction(self.write_opening):
                batch = Batch(cast(Any, self), cast(Any, conn))
                yield batch
                batch.flush()

    def bulk_load(
        self,
        rows: Iterator[tuple[int, str, int, str, bytes]],
        total: int,
        *,
        tracking_name: str,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Fill this empty store with ``rows`` in one transaction (see ``bulk.py``)."""
        from hermes_es.store.postgres.bulk import bulk_load

        with self.errors("bulk-copy into"):
            return bulk_load(
                self._conn,
                self.lock_statements,
                rows,
                total,
                tracking_name=tracking_name,
                progress=progress,
            )

    def scrub_after_delete(self, reason: str = "delete") -> bool:
        """After a committed delete: rewrite the touched tables so no deleted text stays in them.

        ``VACUUM FULL`` writes each table (and its TOAST table and indexes) into new files and
        unlinks the old ones, so the bytes of deleted rows leave the table files; a
        ``CHECKPOINT`` then flushes the new files. It needs each table's exclusive lock for a
        moment: when another session holds one longer than ``SCRUB_LOCK_TIMEOUT`` this returns
        False (the delete itself has committed) and the scrub is recorded as pending in
        ``hermes_meta`` (``doctor`` reports it; the next delete or ``sessions optimize``
        finishes it and clears the record). WAL segments, archives, replicas and backups still
        hold what they held: see docs/postgres.md.
        """
        tables = ", ".join(SCRUB_TABLES)
        try:
            with self.datastore.get_connection() as conn:
                conn.execute(f"SET lock_timeout = '{SCRUB_LOCK_TIMEOUT}'")
                try:
                    conn.execute(f"VACUUM (FULL) {tables}")
                finally:
                    conn.execute("RESET lock_timeout")
                # Flushes the rewritten files and unlinks the old (already truncated) ones;
                # a role without the right to checkpoint leaves that to the next checkpoint.
                with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
                    conn.execute("CHECKPOINT")
                conn.execute(f"DELETE FROM hermes_meta WHERE key = '{SCRUB_PENDING_KEY}'")
        except (PersistenceError, psycopg.Error):
            self._record_pending_scrub(reason)
            return False
        return True

    def _record_pending_scrub(self, reason: str) -> None:
        """Record a blocked scrub (keeping an older record: its time is the one that matters).
        A server that cannot take even this row leaves only the command's warning."""
        value = msgspec.json.encode({"since": self.clock(), "reason": reason}).decode()
        with (
            contextlib.suppress(PersistenceError, psycopg.Error),
            self.datastore.get_connection() as conn,
        ):
            conn.execute(
                "INSERT INTO hermes_meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
                (SCRUB_PENDING_KEY, value),
            )

    def pending_scrub(self) -> PendingScrub | None:
        """The recorded pending scrub, or None (an unreadable record counts as pending)."""
        with self.errors("read"), self.datastore.transaction(commit=False) as curs:
            row = curs.execute(
                "SELECT value FROM hermes_meta WHERE key = %s", (SCRUB_PENDING_KEY,)
            ).fetchone()
        if row is None:
            return None
        try:
            return msgspec.json.decode(str(row["value"]), type=PendingScrub)
        except msgspec.ValidationError:
            return PendingScrub(since=0.0, reason="unknown")

    def close(self) -> None:
        """Close the pool."""
        self.datastore.close()
