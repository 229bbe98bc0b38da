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

The same connection may follow other channels (``channels``: the team relay, ``relay.py``):
each of their payloads goes to its handler, in the order received. The notifications that
arrived while the log was being read are handed over before the streams that read found
changed, so a live item committed before an event reaches the consumer before that event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
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
        self,
        url: str,
        on_change: Callable[[dict[str, int]], None],
        *,
        after: int | None = None,
        channels: Mapping[str, Callable[[str], None]] | None = None,
    ) -> None:
        self.url = url
        self.on_change = on_change
        self.channels = dict(channels or {})
        """Other channels followed: each payload goes to its channel's handler."""
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
        for channel in self.channels:
            conn.execute(f"LISTEN {channel}")
        if self.last is None:
            row = conn.execute(f"SELECT coalesce(max(notification_id), 0) FROM {CHANNEL}")
            found = row.fetchone()
            self.last = int(found[0]) if found else 0
        self.ready.set()
        self._read(conn)  # whatever committed while (re)connecting
        polled = time.monotonic()
        while not self._stop.is_set():
            woke = False
            for notify in conn.notifies(timeout=0.5, stop_after=1):
                woke = self._dispatch(notify) or woke
            if woke or time.monotonic() - polled >= POLL_S:
                polled = time.monotonic()
                self.wakeups += 1
                while self._read(conn):  # a log notification arrived during the read
                    pass

    def _dispatch(self, notify: Any) -> bool:
        """Hand a notification of another channel to its handler; True for the log's own."""
        if notify.channel == CHANNEL:
            return True
        handler = self.channels.get(notify.channel)
        if handler is not None:
            try:
                handler(notify.payload)
            except Exception:  # a failing consumer must not stop the listener
                log.exception("listener handler of %s failed", notify.channel)
        return False

    def _read(self, conn: psycopg.Connection[Any]) -> bool:
        """Report the streams changed since the last read; True when a log notification
        arrived meanwhile (read again: its rows may be past this read's snapshot)."""
        rows = conn.execute(
            f"SELECT originator_id, max(notification_id), max(originator_version) FROM {CHANNEL}"
            " WHERE notification_id > %s GROUP BY originator_id",
            (self.last or 0,),
        ).fetchall()
        again = False
        if self.channels:  # what arrived during the read was committed before what it saw
            for notify in conn.notifies(timeout=0):
                again = self._dispatch(notify) or again
        if not rows:
            return again
        self.last = max(int(r[1]) for r in rows)
        try:
            self.on_change({str(r[0]): int(r[2]) for r in rows})
        except Exception:  # a failing consumer must not stop the listener
            log.exception("log listener callback failed")
        return again
