"""What every projector receives: one stored event with its stream, version and log position."""

from __future__ import annotations

from typing import Protocol

import apsw
import msgspec

from hermes_es.aggregates.state import SessionState
from hermes_es.errors import HolderError
from hermes_es.events import Event


class Change(msgspec.Struct, frozen=True):
    """One event as stored: log position, stream id, stream version and the event."""

    position: int
    stream: str
    version: int
    event: Event


MESSAGE_ID_SHIFT = 4096
"""Message row ids are ``position * 4096 + index``: stable across rebuilds whatever was deleted."""


def message_row_id(position: int, index: int) -> int:
    """The stable row id of the ``index``-th message carried by the event at ``position``."""
    if index >= MESSAGE_ID_SHIFT:
        raise ValueError(f"an event may carry at most {MESSAGE_ID_SHIFT} messages")
    return position * MESSAGE_ID_SHIFT + index


class ReplayRaced(HolderError):
    """A replay read events of a session that was then deleted before the replay finished.

    The fresh tables hold that session's index entries, and the text they were made from is
    gone with its events: the entries cannot be removed exactly, so the replay starts over
    (after ``RACE_ATTEMPTS`` tries it is reported as this clear error, not a traceback).
    """

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session {session_id} was deleted while the replay read it, several times in a "
            "row; nothing was changed; run the command again when no deletes are running",
            subject=session_id,
        )
        self.session_id = session_id


class Projector(Protocol):
    """A read model: its tables, how an event changes them, and how a deleted session leaves."""

    name: str

    def schema(self) -> list[str]:
        """CREATE statements for the projector's tables (idempotent)."""
        ...

    def indexes(self) -> list[str]:
        """CREATE INDEX statements, run after a bulk load."""
        ...

    def tables(self) -> list[str]:
        """Table names, for rebuild swaps and verify checksums."""
        ...

    def apply(self, conn: apsw.Connection, change: Change) -> None:
        """Apply one event."""
        ...

    def settle(self, conn: apsw.Connection, states: dict[str, SessionState]) -> None:
        """Write per-session rows once for a batch, from the folded states."""
        ...

    def forget(self, conn: apsw.Connection, session_id: str) -> None:
        """Physically remove a deleted session's rows."""
        ...
