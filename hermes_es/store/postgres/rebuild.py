"""Rebuild and verify on PostgreSQL: replay the log into fresh tables, swap or compare them.

The replay is the SQLite one (``projections.rebuild.Replayer``: the same fold, the same delete
handling); what differs is reading the log (``notification_id`` order) and the table work.
Rebuild fills ``rebuild_*`` tables while writers keep working, then takes the writers' lock,
catches up, drops the live tables and renames the fresh ones in one transaction. Verify replays
into ``verify_*`` tables inside one repeatable-read snapshot of the live tables, compares each
pair with ``EXCEPT ALL`` both ways, and drops them again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from hermes_es.projections.base import Change
from hermes_es.projections.catalog import get_position, set_position
from hermes_es.projections.rebuild import BATCH, Progress, Replayer, TableDiff
from hermes_es.store.decoding import decode_row
from hermes_es.store.postgres.connection import PgConnection
from hermes_es.store.postgres.projections import PgProjectionSet

REBUILD_PREFIX = "rebuild_"
VERIFY_PREFIX = "verify_"


def log_batches(conn: PgConnection, after: int, upto: int | None = None) -> Iterator[list[Change]]:
    """The log after position ``after`` (up to ``upto``), in batches of decoded changes."""
    last = after
    while True:
        sql = (
            "SELECT notification_id, originator_id, originator_version, topic, state"
            " FROM events WHERE notification_id > %s"
        )
        params: list[object] = [last]
        if upto is not None:
            sql += " AND notification_id <= %s"
            params.append(upto)
        rows = conn.execute_pg(sql + " ORDER BY notification_id LIMIT %s", [*params, BATCH])
        batch = rows.fetchall()
        if not batch:
            return
        yield [
            Change(
                position=r[0],
                stream=r[1],
                version=r[2],
                event=decode_row(r[3], bytes(r[4]), stream=r[1], version=r[2], position=r[0]),
            )
            for r in batch
        ]
        last = batch[-1][0]


def replay_into(conn: PgConnection, pset: PgProjectionSet) -> int:
    """Replay the whole log into ``pset`` inside the caller's transaction; returns the count."""
    replayer = Replayer(pset)
    for changes in log_batches(conn, 0):
        replayer.feed(cast(Any, conn), changes)
    return replayer.count


def _total(conn: PgConnection) -> int:
    return int(conn.execute_pg("SELECT COUNT(*) FROM events").fetchall()[0][0])


def _drop(conn: PgConnection, tables: list[str]) -> None:
    for table in tables:
        conn.execute_pg(f"DROP TABLE IF EXISTS {table}")


def rebuild(conn: PgConnection, lock: list[Any], progress: Progress | None = None) -> int:
    """Replay into fresh tables, then swap them in (``lock``: the writers' lock statements)."""
    fresh = PgProjectionSet(REBUILD_PREFIX, bulk=True)
    live = PgProjectionSet()
    with conn.transaction():
        _drop(conn, fresh.tables())
        fresh.create(cast(Any, conn), with_indexes=False)
    replayer = Replayer(fresh)
    total = _total(conn)
    for changes in log_batches(conn, 0):
        with conn.transaction():
            replayer.feed(cast(Any, conn), changes)
        if progress:
            progress(replayer.count, max(total, replayer.count))
    with conn.transaction() as raw:
        with raw.cursor() as curs:
            for statement in lock:
                curs.execute(statement)
        for changes in log_batches(conn, replayer.position):
            replayer.feed(cast(Any, conn), changes)
        _drop(conn, live.tables())
        for old, new in zip(fresh.tables(), live.tables(), strict=True):
            conn.execute_pg(f"ALTER TABLE {old} RENAME TO {new}")
            conn.execute_pg(f"ALTER INDEX IF EXISTS {old}_pkey RENAME TO {new}_pkey")
        live.create_indexes(cast(Any, conn))
        set_position(cast(Any, conn), replayer.position or get_position(cast(Any, conn)))
    if progress:
        progress(replayer.count, replayer.count)
    return replayer.count


def verify(conn: PgConnection, progress: Progress | None = None) -> list[TableDiff]:
    """Replay into ``verify_*`` tables and compare every projection table with the live one."""
    scratch = PgProjectionSet(VERIFY_PREFIX, bulk=True)
    live = PgProjectionSet()
    replayer = Replayer(scratch)
    with conn.transaction() as raw:
        raw.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        try:
            with conn.transaction():
                _drop(conn, scratch.tables())
                scratch.create(cast(Any, conn), with_indexes=False)
                total = _total(conn)
                for changes in log_batches(conn, 0):
                    replayer.feed(cast(Any, conn), changes)
                    if progress:
                        progress(replayer.count, max(total, replayer.count))
            diffs = []
            for mine, theirs in zip(live.tables(), scratch.tables(), strict=True):
                diffs.append(_compare(conn, mine, theirs))
            position = get_position(cast(Any, conn))
            diffs.append(
                TableDiff("tracking", position, replayer.position, position == replayer.position)
            )
        finally:
            _drop(conn, scratch.tables())
    return diffs


def _compare(conn: PgConnection, live: str, fresh: str) -> TableDiff:
    live_n = int(conn.execute_pg(f"SELECT COUNT(*) FROM {live}").fetchall()[0][0])
    fresh_n = int(conn.execute_pg(f"SELECT COUNT(*) FROM {fresh}").fetchall()[0][0])
    extra = conn.execute_pg(
        f"SELECT COUNT(*) FROM (SELECT * FROM {live} EXCEPT ALL SELECT * FROM {fresh}) d"
    ).fetchall()[0][0]
    missing = conn.execute_pg(
        f"SELECT COUNT(*) FROM (SELECT * FROM {fresh} EXCEPT ALL SELECT * FROM {live}) d"
    ).fetchall()[0][0]
    return TableDiff(live, live_n, fresh_n, live_n == fresh_n and not extra and not missing)
