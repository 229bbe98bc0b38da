"""``PostgresBackend``: a hermes store in a PostgreSQL database named by a ``postgresql://`` URL."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hermes_es.store.backend import Progress, StoreBackend, redact_url

if TYPE_CHECKING:
    import apsw

    from hermes_es.commands.unit_of_work import Store
    from hermes_es.projections.rebuild import TableDiff
    from hermes_es.store.postgres.store import PgStore
    from hermes_es.store.scrub import PendingScrub


class PostgresBackend(StoreBackend):
    """The event log (eventsourcing's postgres recorder) and projections in one database."""

    kind = "postgresql"

    def __init__(self, url: str, *, lease_path: Path) -> None:
        self.url = url
        self.lease_path = lease_path
        self._stores: list[PgStore] = []

    @property
    def location(self) -> str:
        """The URL without its password."""
        return redact_url(self.url)

    def _open(self, clock: Callable[[], float] = time.time) -> PgStore:
        from hermes_es.store.postgres.store import PgStore

        store = PgStore(self.url, clock=clock)
        self._stores.append(store)
        return store

    def exists(self) -> bool:
        """True when the database holds a hermes store (an unreachable server is an error)."""
        from hermes_es.store.postgres.schema import store_exists
        from hermes_es.store.postgres.store import datastore_for, probe

        datastore = datastore_for(self.url, pool_size=1, max_overflow=0)
        try:
            with probe(self.location, datastore), datastore.transaction(commit=False) as curs:
                return store_exists(curs)
        finally:
            datastore.close()

    def store_bytes(self) -> tuple[int, int]:
        """(bytes of the store's tables with their indexes and TOAST, 0): the server's WAL is
        shared by every database of the cluster, so none of it is counted as the store's."""
        from hermes_es.store.postgres.schema import store_bytes

        store = self._open()
        try:
            with store.errors("measure"):
                return store_bytes(store.connection()), 0
        finally:
            self.close_store(store)

    def reader(self) -> apsw.Connection:
        """The connection adapter the queries use (see ``store/postgres/connection.py``)."""
        return cast("apsw.Connection", self._open().connection())

    def light_reader(self) -> apsw.Connection:
        """The same as ``reader``: a server connection has no cheaper kind."""
        return self.reader()

    def store(self, *, clock: Callable[[], float] = time.time) -> Store:
        """The write side: events and projections in one PostgreSQL transaction."""
        return cast("Store", self._open(clock))

    def rebuild(self, progress: Progress | None = None) -> int:
        """Rebuild into ``rebuild_*`` tables and swap them in under the writers' lock."""
        from hermes_es.store.postgres.rebuild import rebuild

        store = self._open()
        try:
            with store.errors("rebuild"):
                return rebuild(
                    store.connection(), store.pg_recorder.lock_table_statements, progress
                )
        finally:
            self.close_store(store)

    def verify(self, progress: Progress | None = None) -> list[TableDiff]:
        """Replay into ``verify_*`` tables in one snapshot and compare with the live tables."""
        from hermes_es.store.postgres.rebuild import verify

        store = self._open()
        try:
            with store.errors("verify"):
                return verify(store.connection(), progress)
        finally:
            self.close_store(store)

    def pending_scrub(self) -> PendingScrub | None:
        """The blocked scrub recorded in ``hermes_meta``, if any."""
        store = self._open()
        try:
            return store.pending_scrub()
        finally:
            self.close_store(store)

    def scrub(self) -> bool:
        """Rewrite the tables deletes touch now (``VACUUM (FULL)``, then ``CHECKPOINT``) and
        clear a pending record; False when another connection's lock still blocks it."""
        store = self._open()
        try:
            return store.scrub_after_delete(reason="optimize")
        finally:
            self.close_store(store)

    def close_store(self, store: Any) -> None:
        """Close one store this backend opened."""
        store.close()
        if store in self._stores:
            self._stores.remove(store)
