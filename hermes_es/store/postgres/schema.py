"""Creating a hermes store in a PostgreSQL database (once, under an advisory lock).

The event log is eventsourcing's own table (``events``: text originator ids, ``bytea`` state,
a ``bigserial`` notification id), created by its recorder's statements, plus a generated
``id`` column equal to the notification id (the name the shared queries read). Beside it: the
reader-position table ``tracking``, the ICU collation ``nocase`` (case-insensitive equality
for titles), the ``pg_trgm`` extension, the projection tables, and ``hermes_meta`` holding the
layout version. A store whose projections have another layout gets them dropped and replayed
from the log in the same transaction, as on SQLite.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore

PG_LAYOUT = 5
"""Layout of what only the PostgreSQL backend adds (types, search tables). 2: a BRIN index over
``messages_fts.id``, no trigram index over ``messages.content``. 3: pair lexemes in every
``tsvector`` (``tokens.py``). 4: id-block lexemes (``id_blocks.py``) and prefix lexemes
(``tokens.py``) in every ``tsvector``. 5: identifier lexemes (``tokens.py``) in every
``tsvector``. A store of layout 2, 3 or 4 has ``messages_fts`` rewritten in place from the
message texts (``search.reindex``: the identifier lexemes need the text, not the stored
lexemes); every other layout has its projections replayed."""
REINDEXED_LAYOUTS = (2, 3, 4)
"""PostgreSQL layouts that become the current one by rewriting the search index alone."""
SUBMISSIONS_LAYOUTS = (9, 10, 11)
"""Shared projection layouts whose PostgreSQL tables are the current one's but for
``turn_submissions`` (12: the submission windows moved out of the heads; 10 changed only
SQLite's message indexes, PostgreSQL keeps ``messages_seq``; 11 only SQLite's full-text
tokens): the table is added and filled from the heads, no replay."""


def layout() -> str:
    """The projection layout: the shared projectors' version and the PostgreSQL one."""
    from hermes_es.projections.catalog import SCHEMA_VERSION

    return f"{SCHEMA_VERSION}.{PG_LAYOUT}"


ADVISORY_LOCK = 0x4E524D45
"""``pg_advisory_xact_lock`` key serializing schema creation between processes."""

EVENTS_TABLE = "events"

EXTENSION_DDL = "CREATE EXTENSION IF NOT EXISTS pg_trgm"

BASE_DDL = [
    "CREATE TABLE IF NOT EXISTS hermes_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tracking ("
    " application_name TEXT PRIMARY KEY, notification_id BIGINT NOT NULL)",
]

EVENTS_ID_COLUMN = (
    "ALTER TABLE events ADD COLUMN IF NOT EXISTS id BIGINT"
    " GENERATED ALWAYS AS (notification_id) STORED"
)
"""The log position under the name the shared queries use (``events.id`` on SQLite)."""

DROPPED_INDEXES = "sessions_active"
"""Indexes earlier layouts created that nothing needs (dropped when the store is opened)."""

WRITE_LOCK_FUNCTION = "hermes_write_lock_v1"
"""The server function a write transaction starts with (see ``write_lock_ddl``)."""


def write_lock_ddl(schema: str, sequence: str) -> str:
    """``hermes_write_lock_v1(timeout_s)``: the writers' lock, and the next notification id.

    It does what eventsourcing's recorder sends as two statements before inserting events
    (``SET LOCAL lock_timeout`` and ``LOCK TABLE events IN EXCLUSIVE MODE``), then returns the
    notification id the log's sequence hands out next. While the lock is held no other writer
    inserts events or draws from the sequence, so the write transaction knows the positions
    of its events before inserting them (``PgEventLog``): its projection rows (whose ids
    derive from the positions) go to the server together with the events, in one statement.
    """
    table = f'"{schema}"."{EVENTS_TABLE}"'
    return (
        f"CREATE OR REPLACE FUNCTION {WRITE_LOCK_FUNCTION}(timeout_s integer) RETURNS bigint"
        " LANGUAGE plpgsql AS $fn$"
        " DECLARE last bigint; called boolean;"
        " BEGIN"
        "  PERFORM set_config('lock_timeout', timeout_s || 's', true);"
        f"  LOCK TABLE {table} IN EXCLUSIVE MODE;"
        f"  SELECT last_value, is_called INTO last, called FROM {sequence};"
        "  RETURN CASE WHEN called THEN last + 1 ELSE last END;"
        " END $fn$"
    )


def _sequence(curs: Any, schema: str) -> str:
    row = curs.execute(
        "SELECT pg_get_serial_sequence(%s, 'notification_id') AS seq",
        (f'"{schema}"."{EVENTS_TABLE}"',),
    ).fetchone()
    return str(row["seq"])


NOCASE_COLLATION = (
    "CREATE COLLATION IF NOT EXISTS nocase"
    " (provider = icu, locale = 'und-u-ks-level2', deterministic = false)"
)


def store_exists(curs: Any) -> bool:
    """True when the database holds a hermes store."""
    row = curs.execute("SELECT to_regclass('hermes_meta') IS NOT NULL AS present").fetchone()
    return bool(row["present"] if isinstance(row, dict) else row[0])


def ensure_schema(datastore: PostgresDatastore, recorder: PostgresApplicationRecorder) -> str:
    """Create (or migrate) the store; concurrent first opens wait for each other. Returns the
    (qualified) name of the sequence handing out notification ids."""
    from hermes_es.store.postgres.connection import PgConnection
    from hermes_es.store.postgres.projections import PgProjectionSet

    with datastore.transaction(commit=True) as curs:
        if store_exists(curs):
            row = curs.execute(
                "SELECT value, to_regprocedure(%s) IS NOT NULL AS fn,"
                " pg_get_serial_sequence(%s, 'notification_id') AS seq FROM hermes_meta"
                " WHERE key = 'schema_version'",
                (f"{WRITE_LOCK_FUNCTION}(integer)", f'"{datastore.schema}"."{EVENTS_TABLE}"'),
            ).fetchone()
            if row is not None and row["value"] == layout() and row["fn"] and row["seq"]:
                datastore.register_type_adapters()
                return str(row["seq"])
    conn = PgConnection(datastore)
    with conn.transaction() as raw:
        curs = raw.cursor()
        curs.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_LOCK,))
        _create_extension(curs)
        for ddl in BASE_DDL:
            curs.execute(ddl)
        curs.execute(NOCASE_COLLATION)
        for statement in recorder.sql_create_statements:
            if "CREATE TYPE" in statement.as_string():
                name = recorder.stored_event_type_name
                found = curs.execute("SELECT to_regtype(%s) AS t", (name,)).fetchone()
                if found is not None and found["t"] is not None:
                    continue
            curs.execute(statement)
        curs.execute(EVENTS_ID_COLUMN)
        sequence = _sequence(curs, datastore.schema)
        curs.execute(write_lock_ddl(datastore.schema, sequence))
        # Stores made before the write-lock function had ``sessions_active``, the very index
        # ``sessions_last_active`` is (one more entry rewritten per append, read by nothing).
        curs.execute(f"DROP INDEX IF EXISTS {DROPPED_INDEXES}")
        row = curs.execute("SELECT value FROM hermes_meta WHERE key = 'schema_version'").fetchone()
        version = str(row["value"]) if row is not None else ""
        if version != layout():
            upgrade = _upgrade(version)
            if upgrade is not None:  # the tables are the current layout's but for these
                if "submissions" in upgrade:
                    from hermes_es.projections.submissions import fill
                    from hermes_es.store.postgres.projections import PgTurnSubmissionsProjector

                    fill(conn, PgTurnSubmissionsProjector())
                if "reindex" in upgrade:
                    from hermes_es.store.postgres.search import reindex_reporting

                    reindex_reporting(curs)
            else:
                live = PgProjectionSet()
                if version:
                    for table in live.tables():
                        curs.execute(f"DROP TABLE IF EXISTS {table}")
                live.create(conn)
                if version:
                    from hermes_es.store.postgres.rebuild import replay_into

                    replay_into(conn, PgProjectionSet(bulk=True))
            curs.execute(
                "INSERT INTO hermes_meta (key, value) VALUES ('schema_version', %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (layout(),),
            )
    datastore.register_type_adapters()
    return sequence


def _create_extension(curs: Any) -> None:
    """``CREATE EXTENSION pg_trgm``; a server without it, or a role that may not create it, is
    an error saying so and what to do (the transaction is rolled back: nothing is created)."""
    import psycopg
    from eventsourcing.persistence import ProgrammingError

    try:
        curs.execute(EXTENSION_DDL)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise ProgrammingError(
            "the role may not create the pg_trgm extension the store needs (it takes CREATE"
            " on the database; or a superuser runs 'CREATE EXTENSION pg_trgm' in it once):"
            f" {' '.join(str(exc).split())}"
        ) from exc
    except psycopg.Error as exc:
        raise ProgrammingError(
            "the server has no pg_trgm extension, which the store needs: install PostgreSQL's"
            " contrib modules on the database server (Debian: postgresql-contrib):"
            f" {' '.join(str(exc).split())}"
        ) from exc


def _upgrade(version: str) -> tuple[str, ...] | None:
    """How a store of layout ``version`` becomes the current one without a replay: the steps
    (``"submissions"``: add ``turn_submissions`` from the heads; ``"reindex"``: rewrite the
    search index; none: its tables already are the current ones), or None (replay the log)."""
    from hermes_es.projections.catalog import SCHEMA_VERSION

    shared, _, own = version.partition(".")
    steps: tuple[str, ...] = ()
    if shared in {str(v) for v in SUBMISSIONS_LAYOUTS}:
        steps = ("submissions",)
    elif shared != str(SCHEMA_VERSION):
        return None
    if own == str(PG_LAYOUT):
        return steps
    return (*steps, "reindex") if own in {str(v) for v in REINDEXED_LAYOUTS} else None


STORE_TABLES = ("events", "tracking", "hermes_meta")
"""The store's own tables beside the projection tables."""


def store_bytes(conn: Any) -> int:
    """Bytes of every table of the store, with its indexes and TOAST data
    (``pg_total_relation_size``)."""
    from hermes_es.store.postgres.projections import PgProjectionSet

    names = [*STORE_TABLES, *PgProjectionSet().tables()]
    row = conn.execute_pg(
        "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relname = ANY(%s)",
        (names,),
    ).fetchone()
    return int(row[0]) if row else 0
