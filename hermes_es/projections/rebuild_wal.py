"""A rebuild's WAL checkpoints, run beside its writes instead of inside them.

SQLite's automatic checkpoint runs in the commit that takes the WAL past 1,000 pages: the
writing thread copies the WAL into the database file and waits for two syncs. A rebuild
commits a batch every few hundred milliseconds and writes gigabytes at 5,000,000 messages, so
that was thousands of checkpoints with their syncs on the rebuild's one writing thread (about
6 s of syncs at 300,000 messages; bench/README.md, "Rebuild, session 6"). Here the rebuild's
connection wakes the store's background ``Checkpointer`` (its own connection, PASSIVE
checkpoints that never block a writer) each time the WAL grew by ``WAKE_PAGES``; the writing
thread checkpoints itself only when the WAL passed ``INLINE_PAGES`` (the backstop for a
checkpointer that cannot keep up, or cannot run). The pages written and their order are the
same: only which thread copies them back changes.
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path

import apsw

from hermes_es.store.recorder import CHECKPOINT_PAGES, Checkpointer

WAKE_PAGES = CHECKPOINT_PAGES
"""WAL growth (pages) at which the background checkpointer is woken."""
INLINE_PAGES = 16_384
"""WAL size (pages, 64 MiB at 4 KiB a page) from which the writing thread checkpoints itself
after a commit. SQLite restarts the WAL from its beginning only when a checkpoint has copied
all of it before the next write; a checkpointer that never catches up would let it grow."""
DEFAULT_AUTOCHECKPOINT = 1000
"""SQLite's own automatic checkpoint threshold, put back when the rebuild's writes end."""


class RebuildCheckpoints:
    """Background checkpoints for one rebuild connection (``start`` … ``stop``)."""

    def __init__(self, conn: apsw.Connection, db_path: Path | str) -> None:
        self.conn = conn
        self.checkpointer = Checkpointer(Path(db_path))
        self._asked = 0
        self._overdue = False
        self.requests = 0
        """Times the background checkpointer was woken."""
        self.inline = 0
        """Checkpoints the writing thread ran itself (the backstop)."""
        self.wal_pages = 0
        """Pages in the WAL after the last commit (small again once the WAL restarted)."""

    def _hook(self, conn: apsw.Connection, name: str, pages: int) -> int:
        self.wal_pages = pages
        if pages < self._asked:  # the WAL restarted from its beginning
            self._asked = 0
        if pages >= self._asked + WAKE_PAGES:
            self._asked = pages
            self.requests += 1
            self.checkpointer.request()
        if pages >= INLINE_PAGES:
            self._overdue = True
        return int(apsw.SQLITE_OK)

    def start(self) -> None:
        """Replace the connection's automatic checkpoint with the background one."""
        self.conn.set_wal_hook(self._hook)

    def after_commit(self) -> None:
        """The backstop: a passive checkpoint on this thread once the WAL is past
        ``INLINE_PAGES`` (call outside a transaction)."""
        if self._overdue and not self.conn.in_transaction:
            self._overdue = False
            self.inline += 1
            with suppress(apsw.BusyError, apsw.LockedError):  # retried after a later commit
                self.conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)

    def stop(self) -> None:
        """Stop the checkpointer thread and give the connection SQLite's own checkpoints back."""
        self.checkpointer.close()
        self.conn.set_wal_hook(None)
        self.conn.wal_autocheckpoint(DEFAULT_AUTOCHECKPOINT)
