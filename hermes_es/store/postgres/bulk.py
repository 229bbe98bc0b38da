"""Bulk copy into an empty PostgreSQL store: ``COPY`` the log, then build every projection once.

``copy-store --bulk`` into a PostgreSQL target takes this path instead of replaying the source
through the write path batch by batch. In one target transaction, holding the writers' lock:

1. every source event goes into ``events`` through one ``COPY`` (stream, version, topic and
   payload; notification ids come from the log's sequence, in the source's log order);
2. the log is replayed into fresh ``rebuild_*`` tables that have no secondary indexes, the
   projectors' many-row inserts going out as ``COPY`` too (``PgConnection.executemany``);
3. the fresh tables replace the live ones, the indexes (GIN over the tsvectors, the
   secondary b-trees) are built once over the full tables, and the copy's and the
   projections' positions are recorded.

Killed at any point, the transaction rolls back and the target is as empty as before: running
the command again starts over. A target that already holds events is refused (the resumable
batch-by-batch copy is the path for that).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

from psycopg.rows import tuple_row

from hermes_es.projections.catalog import set_position
from hermes_es.projections.rebuild import Replayer
from hermes_es.store.codec import pack, unpack
from hermes_es.store.postgres.connection import PgConnection
from hermes_es.store.postgres.projections import PgProjectionSet
from hermes_es.store.postgres.rebuild import REBUILD_PREFIX, log_batches
from hermes_es.store.postgres.schema import EVENTS_TABLE

Progress = Callable[[int, int], None]
EventRow = tuple[int, str, int, str, bytes]
"""(source position, stream, version, topic, payload as the source stores it)."""

MAINTENANCE_WORK_MEM_KB = 1024 * 1024
"""Memory for building the indexes once at the end (PostgreSQL's default is 64 MB): 1 GB,
or the server's own setting when that is higher. A GIN build flushes its accumulated entries
whenever this fills."""


def bulk_load(
    conn: PgConnection,
    lock: list[Any],
    rows: Iterator[EventRow],
    total: int,
    *,
    tracking_name: str,
    progress: Progress | None = None,
) -> int:
    """Load ``rows`` (every source event, in log order) into the empty store behind ``conn``;
    returns how many events were loaded. ``lock``: the writers' lock statements;
    ``tracking_name`` gets the last source position (as the batch-by-batch copy records it)."""
    from hermes_es.errors import ValidationError

    fresh = PgProjectionSet(REBUILD_PREFIX, bulk=True)
    live = PgProjectionSet()
    with conn.transaction() as raw:
        with raw.cursor(row_factory=tuple_row) as curs:
            for statement in lock:
                curs.execute(statement)
            curs.execute(
                "SELECT set_config('maintenance_work_mem', GREATEST(setting::bigint, %s)::text"
                " || 'kB', true) FROM pg_settings WHERE name = 'maintenance_work_mem'",
                (MAINTENANCE_WORK_MEM_KB,),
            )
            held = curs.execute("SELECT EXISTS (SELECT 1 FROM events)").fetchone()
            if held is not None and held[0]:
                raise ValidationError(
                    "the target already holds events; a bulk copy fills only an empty store"
                    " (copy-store without --bulk resumes an interrupted copy)",
                    subject="target",
                )
            loaded, last = 0, 0
            with curs.copy(
                "COPY events (originator_id, originator_version, topic, state) FROM STDIN"
            ) as out:
                for position, stream, version, topic, state in rows:
                    # Stored in this backend's form whatever form the source keeps.
                    out.write_row((stream, version, topic, pack(unpack(state))))
                    last = position
                    loaded += 1
                    if progress and loaded % 5000 == 0:
                        progress(loaded, 2 * total)
            # As every write does: a listener (store/postgres/notify.py) reads the new rows.
            curs.execute(f"NOTIFY {EVENTS_TABLE}")
        for table in fresh.tables():
            conn.execute_pg(f"DROP TABLE IF EXISTS {table}")
        fresh.create(cast(Any, conn), with_indexes=False)
        replayer = Replayer(fresh)
        for changes in log_batches(conn, 0):
            replayer.feed(cast(Any, conn), changes)
            if progress:
                progress(loaded + replayer.count, 2 * total)
        for table in live.tables():
            conn.execute_pg(f"DROP TABLE IF EXISTS {table}")
        for old, new in zip(fresh.tables(), live.tables(), strict=True):
            conn.execute_pg(f"ALTER TABLE {old} RENAME TO {new}")
            conn.execute_pg(f"ALTER INDEX IF EXISTS {old}_pkey RENAME TO {new}_pkey")
        live.create_indexes(cast(Any, conn))
        for table in live.tables():
            conn.execute_pg(f"ANALYZE {table}")
        if replayer.position:
            set_position(cast(Any, conn), replayer.position)
            conn.execute_pg(
                "INSERT INTO tracking (application_name, notification_id) VALUES (%s, %s)"
                " ON CONFLICT (application_name) DO UPDATE"
                " SET notification_id = excluded.notification_id",
                (tracking_name, last),
            )
    if progress:
        progress(2 * total, 2 * total)
    return loaded
