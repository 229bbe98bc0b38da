"""The ``sessions`` read model: one row per session, including its encoded head state.

The ``head`` column holds the folded aggregate state at ``version``: loading a session for a
command is one primary-key read, however long its transcript.

``START_COLUMNS`` (platform, chat id, model config and launch flags as JSON text) are what the
session's ``SessionStarted`` recorded, readable and filterable from plain SQL
(``json_extract(model_config, '$.reasoning_effort')``). They are written once, with the row,
from the event itself: the aggregate state does not carry them, and later updates never touch
them. docs/schema.md describes every column.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from itertools import compress
from operator import itemgetter, ne

import apsw
from msgspec.structs import astuple

from hermes_es import events as ev
from hermes_es.aggregates.state import SessionState, encode_state
from hermes_es.projections.base import Change

COLUMNS = (
    "id", "source", "profile", "user_id", "model", "reasoning", "title", "title_kind",
    "parent_id", "parent_kind", "root_id", "cwd", "workspace_key", "started_at", "last_active",
    "ended", "end_reason", "archived", "pinned", "hidden", "message_count", "active_count",
    "compacted_count", "imported_count", "tokens_in", "tokens_out", "version", "display_version",
    "prompt_hash", "prompt_version", "refresh_pending", "tools", "continued_into",
    "imported_from", "preview", "head",
)  # fmt: skip
START_COLUMNS = ("platform", "chat_id", "model_config", "launch_flags")
"""Columns set once from ``SessionStarted`` when the row is created."""


def _json(value: object) -> str:
    if not value and isinstance(value, dict):
        return "{}"  # most sessions: no model config, no launch flags
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


class SessionsProjector:
    """Keeps ``sessions`` (and each row's head state) equal to the fold of each stream."""

    name = "sessions"
    applies_to: tuple[type, ...] = (ev.SessionStarted,)
    """The events ``apply`` reacts to (``ProjectionSet`` calls it for no other)."""

    def __init__(self, prefix: str = "") -> None:
        self.p = prefix
        cols = ", ".join((*COLUMNS, *START_COLUMNS))
        marks = ", ".join("?" * (len(COLUMNS) + len(START_COLUMNS)))
        updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS[1:])  # not START_COLUMNS
        self._upsert = (
            f"INSERT INTO {prefix}sessions ({cols}) VALUES ({marks})"
            f" ON CONFLICT (id) DO UPDATE SET {updates}"
        )
        self._root = f"SELECT root_id FROM {prefix}sessions WHERE id = ?"
        self._updates: dict[tuple[int, ...], tuple[str, list[int], list[int]]] = {}
        """Per set of changed columns: its UPDATE, where each value sits in the diffed
        values, and which of them are flags (written as integers)."""
        self._previews: dict[str, str] = {}
        self._started: dict[str, tuple[str, str, str, str]] = {}
        """START_COLUMNS values of sessions started in the batch being applied."""

    def tables(self) -> list[str]:
        """Table names."""
        return [f"{self.p}sessions"]

    def schema(self) -> list[str]:
        """Tables; every column a list, picker, filter or prune needs."""
        p = self.p
        return [
            f"CREATE TABLE IF NOT EXISTS {p}sessions ("
            " id TEXT PRIMARY KEY, source TEXT NOT NULL, profile TEXT NOT NULL,"
            " user_id TEXT NOT NULL, model TEXT NOT NULL, reasoning TEXT NOT NULL,"
            " title TEXT NOT NULL, title_kind TEXT NOT NULL, parent_id TEXT NOT NULL,"
            " parent_kind TEXT NOT NULL, root_id TEXT NOT NULL, cwd TEXT NOT NULL,"
            " workspace_key TEXT NOT NULL, started_at REAL NOT NULL, last_active REAL NOT NULL,"
            " ended INTEGER NOT NULL, end_reason TEXT NOT NULL, archived TEXT NOT NULL,"
            " pinned INTEGER NOT NULL, hidden INTEGER NOT NULL, message_count INTEGER NOT NULL,"
            " active_count INTEGER NOT NULL, compacted_count INTEGER NOT NULL,"
            " imported_count INTEGER NOT NULL, tokens_in INTEGER NOT NULL,"
            " tokens_out INTEGER NOT NULL, version INTEGER NOT NULL,"
            " display_version INTEGER NOT NULL, prompt_hash TEXT NOT NULL,"
            " prompt_version INTEGER NOT NULL, refresh_pending INTEGER NOT NULL,"
            " tools TEXT, continued_into TEXT NOT NULL, imported_from TEXT NOT NULL,"
            " preview TEXT NOT NULL, head BLOB NOT NULL, platform TEXT NOT NULL DEFAULT '',"
            " chat_id TEXT NOT NULL DEFAULT '', model_config TEXT NOT NULL DEFAULT '{}',"
            " launch_flags TEXT NOT NULL DEFAULT '{}')",
        ]

    def indexes(self) -> list[str]:
        """Secondary indexes for lists, title resolution and chains."""
        return [
            "CREATE UNIQUE INDEX IF NOT EXISTS sessions_title ON sessions (title COLLATE NOCASE)"
            " WHERE title <> ''",
            "CREATE INDEX IF NOT EXISTS sessions_root ON sessions (root_id)",
            "CREATE INDEX IF NOT EXISTS sessions_parent ON sessions (parent_id)",
            "CREATE INDEX IF NOT EXISTS sessions_workspace ON sessions (workspace_key)",
            "CREATE INDEX IF NOT EXISTS sessions_chat ON sessions (platform, chat_id)"
            " WHERE chat_id <> ''",
            # Lists and ``latest`` walk sessions newest-first and stop after a page: without
            # it every row (and its per-chain subqueries) was read and sorted (3 s at 100k).
            "CREATE INDEX IF NOT EXISTS sessions_last_active ON sessions"
            " (last_active DESC, id DESC)",
            # Open sessions only (few, however many ended ones there are): the gateway's
            # start-up sweep reads these rows instead of every session's.
            "CREATE INDEX IF NOT EXISTS sessions_open ON sessions (last_active) WHERE ended = 0",
        ]

    def apply(self, conn: apsw.Connection, change: Change) -> None:
        """Note what a ``SessionStarted`` recorded; the rest is done in ``settle``."""
        e = change.event
        if isinstance(e, ev.SessionStarted):
            self._started[e.session_id] = (
                e.platform, e.chat_id, _json(e.model_config), _json(e.launch_flags)
            )  # fmt: skip

    def settle(
        self,
        conn: apsw.Connection,
        states: dict[str, SessionState],
        before: Mapping[str, SessionState] | None = None,
    ) -> None:
        """Write the row of every touched session.

        ``before`` holds the states as they were loaded at the start of the transaction (so as
        the rows stood): only the columns that changed are updated, which keeps SQLite from
        rewriting the index entries of unchanged columns, with no extra read.
        """
        run_sql = ""
        run: list[tuple[object, ...]] = []
        """Consecutive sessions whose same columns changed: written by one ``executemany``
        (a group commit settles many sessions at once), rows still in order."""
        for state in states.values():
            root = state.session_id
            if state.parent_kind == "compression" and state.parent_id:
                row = conn.execute(self._root, (state.parent_id,)).fetchall()
                root = str(row[0][0]) if row else state.parent_id
            old = before.get(state.session_id) if before is not None else None
            if old is None or old.version == 0:
                if run:
                    _write_run(conn, run_sql, run)
                    run = []
                started = self._started.pop(state.session_id, ("", "", "{}", "{}"))
                conn.execute(self._upsert, (*row_of(state, root), *started))
                continue
            # Compare the plain values (the head is always rewritten: the version changed),
            # then encode only what is written. The fields are read in C (``astuple``); the
            # columns an append rarely changes are compared as one tuple (unchanged fields
            # are the same objects: equal at once), column by column only when they differ.
            # The root is the same on both sides.
            new = astuple(state)
            previous = astuple(old)
            if _COLD_OF(previous) == _COLD_OF(new):
                changed = tuple(compress(_HOT, map(ne, _HOT_OF(previous), _HOT_OF(new))))
            else:
                changed = tuple(compress(_DIFFED, map(ne, _DIFFED_OF(previous), _DIFFED_OF(new))))
            update = self._updates.get(changed)
            if update is None:
                sets = ", ".join(f"{COLUMNS[i]} = ?" for i in (*changed, _HEAD))
                update = self._updates[changed] = (
                    f"UPDATE {self.p}sessions SET {sets} WHERE id = ?",
                    [_FIELDS.index(COLUMNS[i]) for i in changed],
                    [k for k, i in enumerate(changed) if i in _BOOLS],
                )
            sql, picks, bools = update
            values = [new[k] for k in picks]
            for k in bools:  # stored as integers (PostgreSQL's columns are bigint)
                values[k] = int(values[k])
            if _TOOLS in changed:
                tools = state.tools
                values[changed.index(_TOOLS)] = None if tools is None else json.dumps(tools)
            if sql != run_sql and run:
                _write_run(conn, run_sql, run)
                run = []
            run_sql = sql
            run.append((*values, encode_state(state), state.session_id))
        if run:
            _write_run(conn, run_sql, run)
        self._started.clear()

    def forget(self, conn: apsw.Connection, session_id: str) -> None:
        """Remove the session's rows."""
        conn.execute(f"DELETE FROM {self.p}sessions WHERE id = ?", (session_id,))


def _write_run(conn: apsw.Connection, sql: str, rows: list[tuple[object, ...]]) -> None:
    if len(rows) == 1:
        conn.execute(sql, rows[0])
    else:
        conn.executemany(sql, rows)


_HEAD = COLUMNS.index("head")
_TOOLS = COLUMNS.index("tools")
_ROOT = COLUMNS.index("root_id")
_DIFFED = tuple(i for i in range(1, _HEAD) if i != _ROOT)
"""Columns compared between the row as it stands and the new state (not id, not head, not
the root: it is looked up, the same for both)."""
_FIELDS = SessionState.__struct_fields__
_DIFFED_OF = itemgetter(*(_FIELDS.index(COLUMNS[i]) for i in _DIFFED))
"""The diffed columns' values, in ``_DIFFED`` order, from ``astuple(state)``."""
_APPEND_CHANGES = (
    "last_active", "message_count", "active_count", "tokens_in", "tokens_out", "version",
    "display_version", "preview",
)  # fmt: skip
_HOT = tuple(sorted(COLUMNS.index(c) for c in _APPEND_CHANGES))
"""The columns an append changes (in column order, as ``_DIFFED``)."""
_HOT_OF = itemgetter(*(_FIELDS.index(COLUMNS[i]) for i in _HOT))
_COLD_OF = itemgetter(*(_FIELDS.index(COLUMNS[i]) for i in _DIFFED if i not in _HOT))
_BOOLS = frozenset(COLUMNS.index(c) for c in ("ended", "pinned", "hidden", "refresh_pending"))


def _values(state: SessionState, root_id: str) -> tuple[object, ...]:
    """The row's values up to (not including) the head, with ``tools`` still a list."""
    return (
        state.session_id, state.source, state.profile, state.user_id, state.model,
        state.reasoning, state.title, state.title_kind, state.parent_id, state.parent_kind,
        root_id, state.cwd, state.workspace_key, state.started_at, state.last_active,
        int(state.ended), state.end_reason, state.archived, int(state.pinned), int(state.hidden),
        state.message_count, state.active_count, state.compacted_count, state.imported_count,
        state.tokens_in, state.tokens_out, state.version, state.display_version,
        state.prompt_hash, state.prompt_version, int(state.refresh_pending),
        state.tools, state.continued_into, state.imported_from, state.preview,
    )  # fmt: skip


def row_of(state: SessionState, root_id: str) -> tuple[object, ...]:
    """The sessions row for a folded state."""
    values = list(_values(state, root_id))
    tools = state.tools
    values[_TOOLS] = None if tools is None else json.dumps(tools)
    return (*values, encode_state(state))
