"""The read models in PostgreSQL tables: the same projectors, with PostgreSQL's DDL and upserts.

Each projector keeps the SQLite projector's logic (what an event changes) and replaces only
what has no common spelling: column types (``double precision`` for times, ``bigint`` ids,
``bytea`` heads), ``INSERT OR IGNORE``/``OR REPLACE`` (``ON CONFLICT``), the case-insensitive
unique title index, and the full-text index (``search.py``).
"""

from __future__ import annotations

from typing import Any

from hermes_es import events as ev
from hermes_es.projections.base import Change, Projector
from hermes_es.projections.catalog import ProjectionSet
from hermes_es.projections.lineage import LineageProjector
from hermes_es.projections.messages import MessagesProjector
from hermes_es.projections.prompts import PromptsProjector
from hermes_es.projections.receipts import ReceiptsProjector
from hermes_es.projections.sessions import SessionsProjector
from hermes_es.store.postgres.search import PgSearchProjector


class PgSessionsProjector(SessionsProjector):
    """``sessions`` with PostgreSQL column types."""

    def schema(self) -> list[str]:
        """One row per session; ``head`` is the encoded folded state."""
        p = self.p
        return [
            f"CREATE TABLE IF NOT EXISTS {p}sessions ("
            " id TEXT PRIMARY KEY, source TEXT NOT NULL, profile TEXT NOT NULL,"
            " user_id TEXT NOT NULL, model TEXT NOT NULL, reasoning TEXT NOT NULL,"
            " title TEXT NOT NULL, title_kind TEXT NOT NULL, parent_id TEXT NOT NULL,"
            " parent_kind TEXT NOT NULL, root_id TEXT NOT NULL, cwd TEXT NOT NULL,"
            " workspace_key TEXT NOT NULL, started_at DOUBLE PRECISION NOT NULL,"
            " last_active DOUBLE PRECISION NOT NULL, ended BIGINT NOT NULL,"
            " end_reason TEXT NOT NULL, archived TEXT NOT NULL, pinned BIGINT NOT NULL,"
            " hidden BIGINT NOT NULL, message_count BIGINT NOT NULL,"
            " active_count BIGINT NOT NULL, compacted_count BIGINT NOT NULL,"
            " imported_count BIGINT NOT NULL, tokens_in BIGINT NOT NULL,"
            " tokens_out BIGINT NOT NULL, version BIGINT NOT NULL,"
            " display_version BIGINT NOT NULL, prompt_hash TEXT NOT NULL,"
            " prompt_version BIGINT NOT NULL, refresh_pending BIGINT NOT NULL,"
            " tools TEXT, continued_into TEXT NOT NULL, imported_from TEXT NOT NULL,"
            " preview TEXT NOT NULL, head BYTEA NOT NULL)",
        ]

    def indexes(self) -> list[str]:
        """Unique titles ignoring case (ICU collation ``nocase``), roots, parents, workspaces."""
        return [
            "CREATE UNIQUE INDEX IF NOT EXISTS sessions_title ON sessions (title COLLATE nocase)"
            " WHERE title <> ''",
            "CREATE INDEX IF NOT EXISTS sessions_root ON sessions (root_id)",
            "CREATE INDEX IF NOT EXISTS sessions_parent ON sessions (parent_id)",
            "CREATE INDEX IF NOT EXISTS sessions_workspace ON sessions (workspace_key)",
            "CREATE INDEX IF NOT EXISTS sessions_active ON sessions (last_active DESC, id DESC)",
        ]


class PgMessagesProjector(MessagesProjector):
    """``messages`` with PostgreSQL column types."""

    def schema(self) -> list[str]:
        """Every message ever stored (indexes come separately, after bulk loads)."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            " id BIGINT PRIMARY KEY, session_id TEXT NOT NULL, seq BIGINT NOT NULL,"
            " ord DOUBLE PRECISION NOT NULL, uid TEXT NOT NULL, role TEXT NOT NULL,"
            " content TEXT NOT NULL, parts TEXT, tool_calls TEXT, tool_call_id TEXT,"
            " tool_name TEXT, reasoning TEXT, tokens_in BIGINT NOT NULL,"
            " tokens_out BIGINT NOT NULL, media TEXT, finish_reason TEXT,"
            " at DOUBLE PRECISION NOT NULL, state TEXT NOT NULL, imported BIGINT NOT NULL,"
            " version BIGINT NOT NULL)"
        ]


class PgLineageProjector(LineageProjector):
    """``lineage`` with an ``ON CONFLICT`` upsert."""

    def schema(self) -> list[str]:
        """One edge per child."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            " child_id TEXT PRIMARY KEY, parent_id TEXT NOT NULL, kind TEXT NOT NULL,"
            " at DOUBLE PRECISION NOT NULL)"
        ]

    def apply(self, conn: Any, change: Change) -> None:
        """Record the edge a child's start names."""
        e = change.event
        if isinstance(e, ev.SessionStarted) and e.parent_id:
            conn.execute(
                f"INSERT INTO {self.table} (child_id, parent_id, kind, at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (child_id) DO UPDATE SET parent_id = excluded.parent_id,"
                " kind = excluded.kind, at = excluded.at",
                (e.session_id, e.parent_id, e.parent_kind, e.at),
            )


class PgPromptsProjector(PromptsProjector):
    """``prompts`` with ``ON CONFLICT DO NOTHING``."""

    def schema(self) -> list[str]:
        """Prompt texts by hash."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            " sha256 TEXT PRIMARY KEY, text TEXT NOT NULL, stored_at DOUBLE PRECISION NOT NULL)"
        ]

    def apply(self, conn: Any, change: Change) -> None:
        """Store a prompt text the first time it is seen."""
        e = change.event
        if isinstance(e, ev.PromptStored):
            conn.execute(
                f"INSERT INTO {self.table} (sha256, text, stored_at) VALUES (?, ?, ?)"
                " ON CONFLICT (sha256) DO NOTHING",
                (e.sha256, e.text, e.at),
            )


class PgReceiptsProjector(ReceiptsProjector):
    """``deletions`` with PostgreSQL column types."""

    def schema(self) -> list[str]:
        """One row per delete."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            " position BIGINT PRIMARY KEY, session_id TEXT NOT NULL,"
            " deleted_at DOUBLE PRECISION NOT NULL, actor TEXT NOT NULL, events BIGINT NOT NULL,"
            " messages BIGINT NOT NULL, digest TEXT NOT NULL, reason TEXT NOT NULL)"
        ]


class PgProjectionSet(ProjectionSet):
    """Every read model, in PostgreSQL tables."""

    def make_projectors(self, prefix: str, *, bulk: bool) -> list[Projector]:
        """The PostgreSQL projectors (messages before search: bulk indexing reads its rows)."""
        return [
            PgSessionsProjector(prefix),
            PgMessagesProjector(prefix),
            PgSearchProjector(prefix, bulk=bulk),
            PgLineageProjector(prefix),
            PgPromptsProjector(prefix),
            PgReceiptsProjector(prefix),
        ]
