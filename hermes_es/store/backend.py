"""Where the store lives: one interface, two implementations (a SQLite file, a PostgreSQL database).

A store target is a path (``$HERMES_HOME/state.db``, the default) or a ``postgresql://`` URL. It
is chosen, first match wins, by ``--store URL``, ``$HERMES_STORE_URL``, ``store: {url: …}`` in
the profile's config.yaml, else the profile's state.db. Everything above this module (commands,
queries, the CLI) asks the backend for what it needs: a read connection for the queries, the
write-side store for the engine, rebuild and verify.

Importing this module stays cheap: the SQLite read path imports only apsw (never eventsourcing),
and the PostgreSQL implementation (psycopg, eventsourcing's postgres module) is imported only
when a ``postgresql://`` target is opened.
"""

from __future__ import annotations

import os
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_es.errors import ConfigError, SessionNotFoundError

if TYPE_CHECKING:
    import apsw

    from hermes_es.commands.unit_of_work import Store
    from hermes_es.projections.rebuild import TableDiff
    from hermes_es.store.scrub import PendingScrub

STORE_URL_ENV = "HERMES_STORE_URL"
"""Environment variable naming the store (a path or a ``postgresql://`` URL)."""

POSTGRES_SCHEMES = ("postgresql://", "postgres://")

Progress = Callable[[int, int], None]


def is_postgres_url(target: str | Path) -> bool:
    """True for a ``postgresql://`` (or ``postgres://``) URL."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


def redact_url(url: str) -> str:
    """A URL safe to print: any password replaced by ``***``."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


class StoreBackend(ABC):
    """One store: the event log and every projection, behind the same operations."""

    kind: str
    """``sqlite`` or ``postgresql``."""

    lease_path: Path
    """The local path holder leases are kept beside (``<its dir>/holders/``)."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the store is, for messages (a path, or a URL without its password)."""

    @abstractmethod
    def exists(self) -> bool:
        """True when the store has been created (a read command on a new one finds nothing)."""

    @abstractmethod
    def reader(self) -> apsw.Connection:
        """A read connection for the queries (schema present, search ready)."""

    @abstractmethod
    def light_reader(self) -> apsw.Connection:
        """A read connection for list/stats: the cheapest to open, no search machinery."""

    @abstractmethod
    def store(self, *, clock: Callable[[], float] = time.time) -> Store:
        """The write side: the event log and the projections written in one transaction."""

    @abstractmethod
    def rebuild(self, progress: Progress | None = None) -> int:
        """Replay the log into fresh projection tables and swap them in; returns the count."""

    @abstractmethod
    def verify(self, progress: Progress | None = None) -> list[TableDiff]:
        """Replay the log into scratch tables and compare every projection table with live."""

    @abstractmethod
    def store_bytes(self) -> tuple[int, int]:
        """(bytes the store takes, bytes of its write-ahead log) for ``sessions stats``."""

    @abstractmethod
    def pending_scrub(self) -> PendingScrub | None:
        """A delete's scrub that something blocked and nothing has finished yet, or None."""

    @abstractmethod
    def scrub(self) -> bool:
        """Finish what deletes left on disk now; False when something still blocks it."""

    def require(self) -> None:
        """Raise ``SessionNotFoundError`` when the store does not exist yet."""
        if not self.exists():
            raise SessionNotFoundError(
                f"no sessions yet: {self.location} does not exist", subject=self.location
            )


class SqliteBackend(StoreBackend):
    """One state.db file (WAL, APSW)."""

    kind = "sqlite"

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.lease_path = self.path

    @property
    def location(self) -> str:
        """The file's path."""
        return str(self.path)

    def exists(self) -> bool:
        """True when the file exists."""
        return self.path.exists()

    def reader(self) -> apsw.Connection:
        """A connection with the ``hermes`` tokenizer registered and the schema present."""
        from hermes_es.projections.catalog import connect

        return connect(self.path)

    def light_reader(self) -> apsw.Connection:
        """A plain connection (no tokenizer, no projection modules imported)."""
        from hermes_es.store.db import open_db

        return open_db(self.path)

    def store(self, *, clock: Callable[[], float] = time.time) -> Store:
        """The APSW store (imports eventsourcing)."""
        from hermes_es.commands.unit_of_work import Store

        return Store(self.path, clock=clock)

    def store_bytes(self) -> tuple[int, int]:
        """The sizes of state.db and of its WAL file."""
        from hermes_es.queries.listing import db_sizes

        return db_sizes(self.path)

    def rebuild(self, progress: Progress | None = None) -> int:
        """Rebuild into ``rebuild_*`` tables and swap them in one transaction."""
        from hermes_es.projections.rebuild import rebuild

        return rebuild(self.path, progress=progress)

    def verify(self, progress: Progress | None = None) -> list[TableDiff]:
        """Replay into a private, unlinked temporary database and compare checksums."""
        from hermes_es.projections.rebuild import verify

        return verify(self.path, progress=progress)

    def pending_scrub(self) -> PendingScrub | None:
        """The record beside state.db (``state.db.scrub-pending``), if any."""
        from hermes_es.store.scrub import pending_scrub

        return pending_scrub(self.path)

    def scrub(self) -> bool:
        """Complete a pending scrub of state.db now (``sessions optimize`` does more: it
        also merges the index and VACUUMs); True when none is left."""
        from hermes_es.store.db import open_db
        from hermes_es.store.scrub import finish_pending

        if not self.path.exists():
            return True
        conn = open_db(self.path)
        try:
            return finish_pending(conn, self.path)
        finally:
            conn.close()


def open_backend(target: str | Path, *, lease_path: Path | None = None) -> StoreBackend:
    """The backend for a path (SQLite) or a ``postgresql://`` URL.

    ``lease_path``: for a server store, the local path whose directory keeps holder leases
    (the CLI passes the profile's state.db path; default ``$HERMES_HOME/state.db``).
    """
    if is_postgres_url(target):
        from hermes_es.store.postgres.backend import PostgresBackend

        if lease_path is None:
            from hermes_es.home import hermes_home

            lease_path = hermes_home(os.environ) / "state.db"
        return PostgresBackend(str(target), lease_path=lease_path)
    if isinstance(target, str) and "://" in target:
        scheme = target.split("://", 1)[0]
        raise ConfigError(
            f"store URL {redact_url(target)!r}: unsupported scheme {scheme!r};"
            " use a file path or postgresql://user@host:port/dbname",
            subject=redact_url(target),
        )
    return SqliteBackend(Path(target).expanduser())


_STORE_LINE = re.compile(r"^store\s*:", re.MULTILINE)


def configured_url(config_path: Path) -> str | None:
    """``store.url`` from a config.yaml, or None (the file is parsed only when it names a store)."""
    try:
        text = config_path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    if not _STORE_LINE.search(text):
        return None
    from hermes_es.config import load_config

    url = load_config(config_path).config.store.url
    return url or None


def resolve_target(
    default_db: Path,
    config_path: Path,
    *,
    option: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> str | Path:
    """The store: ``--store``, then ``$HERMES_STORE_URL``, then config.yaml, else state.db."""
    if option:
        return option
    env = environ.get(STORE_URL_ENV, "").strip()
    if env:
        return env
    return configured_url(config_path) or default_db
