"""Following the event log of a PostgreSQL store live, through LISTEN/NOTIFY.

Every write transaction already sends eventsourcing's recorder notification (``NOTIFY events``,
no payload, delivered at commit). ``LogListener`` listens on that channel on a dedicated
connection and, on each wake-up, reads which streams gained events past the last log position it
has seen (``SELECT originator_id, max(notification_id) … WHERE notification_id > last``). The
position is the log's own, so notifications that PostgreSQL coalesced, or that were missed while
the connection was down, lose nothing: the next read covers every row after ``last``. Writers
hold the log's ``EXCLUSIVE`` lock until they commit, so positions become visible in order.

The callback gets the changed streams, each with its newest version; the caller reads each
stream's events after the version it has already sent, when that is older (so nothing is sent
twice, and the commits of the process itself, already sent, cost no read). A wake-up also
happens every ``POLL_S`` seconds without a notification, as a backstop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from hermes_es.store.postgres.schema import EVENTS_TABLE
from hermes_es.store.postgres.team import connect

log = logging.getLogger("hermes.store")

POLL_S = 5.0
"""A read of the log this often even without a notification."""

RECONNECT_S = 0.5

CHANNEL = EVENTS_TABLE
"""The recorder's channel (its events table's name)."""


class LogListener:
    """A thread that reports which streams gained events, as their commits become visible."""

    def __init__(
        self, url: str, on_change: Callable[[dict[str, int]], None], *, after: int | None = None
    ) -> None:
        self.url = url
        self.on_change = on_change
        self.last = after
        """The last log position read (None: start from the log's current end)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hermes-pg-listen", daemon=True)
        self.ready = threading.Event()
        """Set once LISTEN is in place (events committed after it are reported)."""
        self.wakeups = 0

    def start(self) -> LogListener:
        """Start following."""
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Stop following (within about a second)."""
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with connect(self.url, application_name="hermes-gateway-listen") as conn:
                    self._follow(conn)
            except psycopg.Error as exc:
                if self._stop.is_set():
                    return
                log.warning("log listener lost its connection (%s); reconnecting", exc)
                self._stop.wait(RECONNECT_S)

    def _follow(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"LISTEN {CHANNEL}")
        if self.last is None:
            row = conn.execute(f"SELECT coalesce(max(notification_id), 0) FROM {CHANNEL}")
            found = row.fetchone()
            self.last = int(found[0]) if found else 0
        self.ready.set()
        self._read(conn)  # whatever committed while (re)connecting
        waited = 0.0
        while not self._stop.is_set():
            woke = False
            for _ in conn.notifies(timeout=0.5, stop_after=1):
                woke = True
            waited = 0.0 if woke else waited + 0.5
            if woke or waited >= POLL_S:
                waited = 0.0
                self.wakeups += 1
                self._read(conn)

    def _read(self, conn: psycopg.Connection[Any]) -> None:
        rows = conn.execute(
            f"SELECT originator_id, max(notification_id), max(originator_version) FROM {CHANNEL}"
            " WHERE notification_id > %s GROUP BY originator_id",
            (self.last or 0,),
        ).fetchall()
        if not rows:
            return
        self.last = max(int(r[1]) for r in rows)
        try:
            self.on_change({str(r[0]): int(r[2]) for r in rows})
        except Exception:  # a failing consumer must not stop the listener
            log.exception("log listener callback failed")
