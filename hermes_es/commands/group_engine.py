"""``GroupCommitEngine``: the engine a gateway uses, every write routed through its group writer.

The same use cases as ``SessionEngine`` (the turn runner ``Chat`` calls it unchanged), but each
write method runs on the writer thread inside a group transaction (its own savepoint), and
returns once that group committed. After a write the engine reports the sessions it changed
to ``on_change`` (the gateway's live fan-out reads their new events from the log).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hermes_es.aggregates.state import SessionState
from hermes_es.aggregates.validation import DEFAULT_MAX_MESSAGE_BYTES
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.writer import GroupWriter
from hermes_es.queries.turns import head
from hermes_es.store.backend import StoreBackend

T = TypeVar("T")

OnChange = Callable[[str], None]


def _ignore(_: str) -> None:
    """Default change listener: nothing."""


class GroupCommitEngine(SessionEngine):
    """A ``SessionEngine`` whose writes are group-committed by one writer thread."""

    def __init__(
        self,
        target: StoreBackend | Path | str,
        *,
        clock: Callable[[], float] = time.time,
        actor: str = "",
        writer: GroupWriter | None = None,
        on_change: OnChange = _ignore,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        """``target``: a backend (SQLite or PostgreSQL), a state.db path or a ``postgresql://``
        URL, as for ``SessionEngine``; the writer groups on that store's own transactions."""
        super().__init__(target, clock=clock, actor=actor, max_message_bytes=max_message_bytes)
        self.writer = writer or GroupWriter(self.store).start()
        self.on_change = on_change

    def with_actor(self, actor: str) -> GroupCommitEngine:
        """A view of this engine acting as ``actor`` (same store, writer and listener)."""
        view = object.__new__(GroupCommitEngine)
        view.__dict__.update(self.__dict__)
        view.actor = actor
        return view

    def close(self) -> None:
        """Stop the writer, then close the store."""
        self.writer.stop()
        super().close()

    def run(
        self, fn: Callable[[], T], *, changed: str = "", alone: bool = False, pure: bool = False
    ) -> T:
        """Run a use case through the writer; report ``changed`` after the commit (``pure``:
        it only reads and writes through the store's batches, ``GroupWriter.submit``)."""
        result = self.writer.call(fn, alone=alone, pure=pure)
        if changed and not self.writer.on_writer_thread():
            self.on_change(changed)
        return result

    # -- routed use cases (the signatures are SessionEngine's) --------------------------------

    def get(self, session_id: str) -> SessionState:
        """The committed head, read on the calling thread's own connection (a plain read, no
        trip through the writer); an absent or deleted session goes through the writer for
        its exact error."""
        if not self.writer.on_writer_thread():
            state = head(self.store.connection(), session_id)
            if state is not None and state.version:
                return state
        return self.run(lambda: SessionEngine.get(self, session_id))

    def start_session(self, *args: Any, **kwargs: Any) -> str:
        sid = self.run(lambda: SessionEngine.start_session(self, *args, **kwargs))
        if not self.writer.on_writer_thread():
            self.on_change(sid)
        return sid

    def append_turn(self, session_id: str, *args: Any, **kwargs: Any) -> list[int]:
        return self.run(
            lambda: SessionEngine.append_turn(self, session_id, *args, **kwargs),
            changed=session_id,
            pure=True,
        )

    def record_usage(self, session_id: str, *args: Any, **kwargs: Any) -> None:
        self.run(
            lambda: SessionEngine.record_usage(self, session_id, *args, **kwargs),
            changed=session_id,
            pure=True,
        )

    def rewind(self, session_id: str, *args: Any, **kwargs: Any) -> list[int]:
        return self.run(
            lambda: SessionEngine.rewind(self, session_id, *args, **kwargs), changed=session_id
        )

    def rewind_turns(self, session_id: str, *args: Any, **kwargs: Any) -> list[int]:
        return self.run(
            lambda: SessionEngine.rewind_turns(self, session_id, *args, **kwargs),
            changed=session_id,
        )

    def edit_message(self, session_id: str, *args: Any, **kwargs: Any) -> int:
        return self.run(
            lambda: SessionEngine.edit_message(self, session_id, *args, **kwargs),
            changed=session_id,
        )

    def compact(self, session_id: str, *args: Any, **kwargs: Any) -> list[int]:
        return self.run(
            lambda: SessionEngine.compact(self, session_id, *args, **kwargs), changed=session_id
        )

    def continue_session(self, session_id: str, *args: Any, **kwargs: Any) -> str:
        child = self.run(
            lambda: SessionEngine.continue_session(self, session_id, *args, **kwargs),
            changed=session_id,
        )
        self.on_change(child)
        return child

    def _simple(self, session_id: str, decide: Any) -> SessionState:
        return self.run(
            lambda: SessionEngine._simple(self, session_id, decide), changed=session_id, pure=True
        )

    def request_prompt_refresh(self, *args: Any, **kwargs: Any) -> int:
        return self.run(lambda: SessionEngine.request_prompt_refresh(self, *args, **kwargs))

    def store_system_prompt(self, session_id: str, *args: Any, **kwargs: Any) -> str:
        return self.run(
            lambda: SessionEngine.store_system_prompt(self, session_id, *args, **kwargs),
            changed=session_id,
        )
