"""The read models in PostgreSQL tables: the same projectors, with PostgreSQL's DDL and upserts.

Each projector keeps the SQLite projector's logic (what an event changes), its column list and
its indexes, and replaces only what has no common spelling: column type names (``pg_ddl``),
``INSERT OR IGNORE``/``OR REPLACE`` (``ON CONFLICT``), and the full-text index (``search.py``).
"""

from __future__ import annotations

import re
from typing import Any

from hermes_es import events as ev
from hermes_es.projections.base import Change, Projector
from hermes_es.projections.catalog import ProjectionSet
from hermes_es.projections.lineage import LineageProjector
from hermes_es.projections.messages import MessagesProjector
from hermes_es.projections.prompts import PromptsProjector
from hermes_es.projections.receipts import ReceiptsProjector
from hermes_es.projections.sessions import SessionsProjector
from hermes_es.projections.submissions import TurnSubmissionsProjector
from hermes_es.projections.turn_work import TurnWorkProjector
from hermes_es.store.postgres.search import PgSearchProjector

_TYPES = re.compile(r"\b(INTEGER|REAL|BLOB)\b|\s+WITHOUT ROWID\b")
_PG_TYPES = {"INTEGER": "BIGINT", "REAL": "DOUBLE PRECISION", "BLOB": "BYTEA"}


def pg_ddl(statements: list[str]) -> list[str]:
    """SQLite table DDL in PostgreSQL's spelling.

    The projectors own their column lists (others add columns); only the type names differ:
    ``INTEGER`` is ``BIGINT`` (ids are ``position * 4096 + index``), ``REAL`` is ``DOUBLE
    PRECISION`` (PostgreSQL's ``real`` is four bytes), ``BLOB`` is ``BYTEA``, and tables have no
    ``WITHOUT ROWID``. ``COLLATE NOCASE`` needs nothing: it names the ``nocase`` ICU collation
    the schema creates.
    """
    return [_TYPES.sub(lambda m: _PG_TYPES.get(m.group(1) or "", ""), s) for s in statements]


class PgSessionsProjector(SessionsProjector):
    """``sessions`` in PostgreSQL types, with the SQLite indexes (unique titles through the
    ``nocase`` collation; ``sessions_last_active`` serves newest-first lists)."""

    def schema(self) -> list[str]:
        """The SQLite table in PostgreSQL types."""
        return pg_ddl(super().schema())


class PgMessagesProjector(MessagesProjector):
    """``messages`` in PostgreSQL types, the text kept in the table (``text_in_rows``)."""

    moved_index = False  # PostgreSQL keeps its unique (session_id, seq) index

    def __init__(self, prefix: str = "") -> None:
        super().__init__(prefix, text_in_rows=True)

    def schema(self) -> list[str]:
        """The SQLite table in PostgreSQL types."""
        return pg_ddl(super().schema())


class PgLineageProjector(LineageProjector):
    """``lineage`` with an ``ON CONFLICT`` upsert."""

    def schema(self) -> list[str]:
        """The SQLite table in PostgreSQL types."""
        return pg_ddl(super().schema())

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
        """The SQLite table in PostgreSQL types."""
        return pg_ddl(super().schema())

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
    """``deletions`` in PostgreSQL types."""

    def schema(self) -> list[str]:
        """The SQLite table in PostgreSQL types."""
        return pg_ddl(super().schema())


class PgTurnWorkProjector(TurnWorkProjector):
    """``turn_work`` in PostgreSQL types (its upsert is common SQL)."""

    def schema(self) -> list[str]:
        """The SQLite table in PostgreSQL types."""
        return pg_ddl(super().schema())


class PgTurnSubmissionsProjector(TurnSubmissionsProjector):
    """``turn_submissions`` in PostgreSQL types (a plain table: no ``WITHOUT ROWID``)."""

    def schema(self) -> list[str]:
        """The SQLite table in PostgreSQL types."""
        return pg_ddl(super().schema())


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
            PgTurnWorkProjector(prefix),
            PgTurnSubmissionsProjector(prefix),
        ]
