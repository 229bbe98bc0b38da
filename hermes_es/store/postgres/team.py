"""A team of gateways on one PostgreSQL store: the ownership lock and the gateway registry.

Several gateway processes (on several hosts) may run for one profile on one database; exactly one
owns execution. Ownership is a **session-level advisory lock** (``pg_advisory_lock(class, key)``,
the key derived from the profile name) held on a dedicated connection for the owner's lifetime.
PostgreSQL releases it when that connection's backend ends: a killed process closes its socket
at once, and on a host that vanished the server's TCP keepalives (set on the lock connection:
idle 1 s, 1 s between probes, 2 probes, ``tcp_user_timeout`` 3 s) end the backend within about
3 s. A standby waits for the lock with ``pg_advisory_lock`` under a 1 s ``lock_timeout`` in a
loop: the server wakes the waiter the moment the lock is released, and the loop still notices a
stop request or the loss of its own connection within a second.

The registry (table ``hermes_gateways``) says where each gateway of a profile listens: instance
id, role, host name, address, port, pid, epoch and the backend pid of its lock connection. The
live owner is the owner row whose backend pid holds the advisory lock right now (``pg_locks``),
so a row left by a killed owner is never taken for the live one.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from typing import Any

import msgspec
import psycopg
from psycopg.conninfo import conninfo_to_dict

from hermes_es.store.postgres.connection import PgConnection
from hermes_es.store.postgres.schema import ADVISORY_LOCK

LOCK_CLASS = 0x4E524D47
"""First key of the ownership lock (``pg_advisory_lock(int4, int4)``): hermes gateways."""

WAIT_S = 1.0
"""How long one wait for the lock lasts before the standby loop checks its stop flag."""

KEEPALIVES: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 1,
    "keepalives_interval": 1,
    "keepalives_count": 2,
    "tcp_user_timeout": 3000,
}
"""libpq keepalives of the lock connection (the client side notices a dead server)."""

SERVER_KEEPALIVES = (
    "SET tcp_keepalives_idle = 1",
    "SET tcp_keepalives_interval = 1",
    "SET tcp_keepalives_count = 2",
    "SET tcp_user_timeout = 3000",
)
"""The server side of the same connection: its backend ends within ~3 s of a host vanishing."""

REGISTRY_DDL = (
    "CREATE TABLE IF NOT EXISTS hermes_gateways ("
    " instance_id TEXT PRIMARY KEY, profile TEXT NOT NULL, role TEXT NOT NULL,"
    " hostname TEXT NOT NULL, host TEXT NOT NULL, port INTEGER NOT NULL, pid INTEGER NOT NULL,"
    " epoch INTEGER NOT NULL, backend_pid INTEGER NOT NULL,"
    " started_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL)"
)


def lock_key(profile: str) -> int:
    """The second key of the profile's ownership lock (a stable 31-bit hash of its name)."""
    digest = hashlib.blake2b(f"hermes.gateway:{profile}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def connect(url: str, *, application_name: str = "hermes-gateway") -> psycopg.Connection[Any]:
    """A dedicated autocommit connection with keepalives on both sides. The URL's libpq
    parameters apply as for the store's pool (its own keepalive settings, when it gives
    any, win); host, port and user default as there."""
    params: dict[str, Any] = dict(conninfo_to_dict(url))
    params.setdefault("host", "127.0.0.1")
    params.setdefault("port", "5432")
    params.setdefault("user", "postgres")
    params.setdefault("connect_timeout", 5)
    params.setdefault("application_name", application_name)
    for key, value in KEEPALIVES.items():
        params.setdefault(key, value)
    conn = psycopg.connect(autocommit=True, **params)
    for statement in SERVER_KEEPALIVES:
        conn.execute(statement)
    return conn


class OwnerLock:
    """The profile's ownership lock on its own connection (one thread uses it at a time)."""

    def __init__(self, url: str, profile: str) -> None:
        self.url = url
        self.profile = profile
        self.key = lock_key(profile)
        self.conn: psycopg.Connection[Any] | None = None
        self.held = False

    @property
    def backend_pid(self) -> int:
        """The server process of the lock connection (0 before it is connected)."""
        return int(self.conn.info.backend_pid) if self.conn is not None else 0

    def _connection(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed:
            self.conn = connect(self.url, application_name=f"hermes-gateway-lock:{self.profile}")
            self.held = False
        return self.conn

    def try_acquire(self) -> bool:
        """Take the lock if it is free; True when this process owns the profile now."""
        row = (
            self._connection()
            .execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, self.key))
            .fetchone()
        )
        self.held = bool(row and row[0])
        return self.held

    def wait(self, timeout_s: float = WAIT_S) -> bool:
        """Wait up to ``timeout_s`` for the lock (woken at once when it is released); True
        when acquired. A lost connection is reconnected on the next call (after a pause)."""
        try:
            conn = self._connection()
            conn.execute(f"SET lock_timeout = '{int(timeout_s * 1000)}ms'")
            try:
                conn.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, self.key))
            except psycopg.errors.LockNotAvailable:
                return False
            finally:
                if not conn.closed:
                    conn.execute("RESET lock_timeout")
        except psycopg.OperationalError:
            self._drop()
            time.sleep(min(timeout_s, 0.5))
            return False
        self.held = True
        return True

    def check(self, timeout_s: float = 2.0) -> bool:
        """True while the lock connection answers (so the lock is still held)."""
        if not self.held or self.conn is None or self.conn.closed:
            return False
        try:
            self.conn.execute(f"SET statement_timeout = '{int(timeout_s * 1000)}ms'")
            self.conn.execute("SELECT 1")
            self.conn.execute("RESET statement_timeout")
        except psycopg.Error:
            self._drop()
            return False
        return True

    def _drop(self) -> None:
        conn, self.conn, self.held = self.conn, None, False
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def close(self) -> None:
        """Release the lock (closing its connection ends the backend, which releases it)."""
        self._drop()


class GatewayRow(msgspec.Struct, frozen=True, kw_only=True):
    """One gateway of a profile as the registry holds it."""

    instance_id: str
    profile: str
    role: str
    hostname: str
    host: str
    port: int
    pid: int
    epoch: int
    backend_pid: int
    started_at: float
    updated_at: float

    @property
    def ws_url(self) -> str:
        """Its WebSocket URL (on its own host)."""
        return f"ws://{self.host}:{self.port}/ws"


_COLUMNS = (
    "instance_id, profile, role, hostname, host, port, pid, epoch, backend_pid,"
    " started_at, updated_at"
)
_NAMES = tuple(c.strip() for c in _COLUMNS.split(","))


def _row(values: Any) -> GatewayRow:
    return GatewayRow(**dict(zip(_NAMES, values, strict=True)))


class GatewayRegistry:
    """The ``hermes_gateways`` table, through the store's pooled connection."""

    def __init__(self, conn: PgConnection) -> None:
        self.conn = conn
        with conn.transaction() as raw:  # concurrent first creations wait for each other
            raw.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_LOCK,))
            raw.execute(REGISTRY_DDL)

    def publish(self, row: GatewayRow) -> None:
        """Insert or replace this gateway's row."""
        values = msgspec.structs.astuple(row)
        self.conn.execute_pg(
            f"INSERT INTO hermes_gateways ({_COLUMNS})"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (instance_id) DO UPDATE SET role = excluded.role,"
            " host = excluded.host, port = excluded.port, epoch = excluded.epoch,"
            " backend_pid = excluded.backend_pid, updated_at = excluded.updated_at",
            values,
        )

    def remove(self, instance_id: str) -> None:
        """Delete this gateway's row (a clean stop)."""
        self.conn.execute_pg("DELETE FROM hermes_gateways WHERE instance_id = %s", (instance_id,))

    def forget_dead(self, profile: str) -> int:
        """Delete the rows of the profile's gateways whose lock connection is gone (killed
        processes); returns how many."""
        cur = self.conn.execute_pg(
            "DELETE FROM hermes_gateways WHERE profile = %s"
            " AND backend_pid NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)",
            (profile,),
        )
        return cur.rowcount

    def members(self, profile: str) -> list[GatewayRow]:
        """The profile's gateways whose lock connection is alive, owner first."""
        rows = self.conn.execute_pg(
            f"SELECT {_COLUMNS} FROM hermes_gateways WHERE profile = %s AND backend_pid IN"
            " (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)"
            " ORDER BY role = 'owner' DESC, started_at",
            (profile,),
        ).fetchall()
        return [_row(r) for r in rows]

    def live_owner(self, profile: str) -> GatewayRow | None:
        """The owner row whose lock connection holds the profile's lock now, or None."""
        rows = self.conn.execute_pg(
            f"SELECT {', '.join('g.' + c for c in _NAMES)}"
            " FROM hermes_gateways g JOIN pg_locks l ON l.pid = g.backend_pid"
            " WHERE g.profile = %s AND g.role = 'owner' AND l.locktype = 'advisory'"
            " AND l.granted AND l.classid::bigint = %s AND l.objid::bigint = %s"
            " AND l.objsubid = 2 ORDER BY g.updated_at DESC LIMIT 1",
            (profile, LOCK_CLASS, lock_key(profile)),
        ).fetchall()
        if not rows:
            return None
        return _row(rows[0])
