"""Build Hermes Agent state.db files in the published shapes, for the legacy reader's tests.

Two shapes, both written from the column lists documented for hermes-agent (see the module
docstring of ``hermes_es.migrate.hermes_db``):

- ``V20``: the documented minimum at schema version 20 — the columns added by versions 1-18 and
  the v20 ``session_model_usage`` table with its pre-v22 five-column key. No ``active`` /
  ``compacted`` flags, no workspace or pinned/archived/hidden columns, no ``system_prompts``.
- ``V30``: the newest published shape (schema version 30), with prompt de-duplication,
  workspace, flag and display columns.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

import apsw

_V20_SESSIONS = """
    id TEXT PRIMARY KEY, source TEXT NOT NULL, user_id TEXT, session_key TEXT, chat_id TEXT,
    chat_type TEXT, thread_id TEXT, display_name TEXT, origin_json TEXT,
    expiry_finalized INTEGER DEFAULT 0, model TEXT, model_config TEXT, system_prompt TEXT,
    parent_session_id TEXT, started_at REAL NOT NULL, ended_at REAL, end_reason TEXT,
    message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0,
    cache_read_tokens INTEGER DEFAULT 0, cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0, billing_provider TEXT, billing_base_url TEXT,
    billing_mode TEXT, estimated_cost_usd REAL, actual_cost_usd REAL, cost_status TEXT,
    cost_source TEXT, pricing_version TEXT, title TEXT, api_call_count INTEGER DEFAULT 0,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)
"""

_V30_EXTRA_SESSIONS = """
    created_source TEXT, system_prompt_hash TEXT, cwd TEXT, git_branch TEXT,
    git_repo_root TEXT, git_metadata_generation INTEGER NOT NULL DEFAULT 0,
    title_source TEXT, last_activity_at REAL, last_activity_description TEXT,
    last_activity_provenance TEXT, handoff_state TEXT, handoff_platform TEXT,
    handoff_error TEXT, compression_failure_cooldown_until REAL,
    compression_failure_error TEXT, compression_fallback_streak INTEGER NOT NULL DEFAULT 0,
    compression_ineffective_count INTEGER NOT NULL DEFAULT 0,
    compression_recovery_deadline REAL, compression_overload_streak INTEGER NOT NULL DEFAULT 0,
    profile_name TEXT, transport_profile TEXT, rewind_count INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0, pinned INTEGER NOT NULL DEFAULT 0,
    hidden INTEGER NOT NULL DEFAULT 0, last_read_at REAL, tool_names TEXT,
"""

_V20_MESSAGES = """
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
    timestamp REAL NOT NULL, token_count INTEGER, finish_reason TEXT, reasoning TEXT,
    reasoning_content TEXT, reasoning_details TEXT, codex_reasoning_items TEXT,
    codex_message_items TEXT
"""

_V30_EXTRA_MESSAGES = """,
    effect_disposition TEXT, platform_message_id TEXT, observed INTEGER DEFAULT 0,
    _compressed_summary INTEGER NOT NULL DEFAULT 0, active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER NOT NULL DEFAULT 0, api_content TEXT, display_kind TEXT,
    display_metadata TEXT, display_identity BLOB, display_order INTEGER
"""

_USAGE_V20 = """
CREATE TABLE session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '', billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '', api_call_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode));
"""

_USAGE_V30 = _USAGE_V20.replace(
    "billing_mode TEXT NOT NULL DEFAULT '',", "billing_mode TEXT NOT NULL DEFAULT '', task TEXT,"
).replace("billing_mode));", "billing_mode, task));")


def schema_sql(version: int) -> str:
    """DDL for a Hermes state.db of the given shape (20 = documented minimum, else newest)."""
    newest = version > 20
    sessions = (_V30_EXTRA_SESSIONS if newest else "") + _V20_SESSIONS
    messages = _V20_MESSAGES + (_V30_EXTRA_MESSAGES if newest else "")
    parts = [
        "CREATE TABLE schema_version (version INTEGER NOT NULL);",
        "CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT);",
        f"CREATE TABLE sessions ({sessions});",
        f"CREATE TABLE messages ({messages});",
        "CREATE INDEX idx_messages_session_id ON messages(session_id, id);",
        "CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions(title) WHERE title IS NOT NULL;",
        _USAGE_V30 if newest else _USAGE_V20,
    ]
    if newest:
        parts.insert(
            0, "CREATE TABLE system_prompts (hash TEXT PRIMARY KEY, prompt TEXT NOT NULL);"
        )
    return "\n".join(parts)


class HermesStateDb:
    """A Hermes-shaped state.db being written by a test; close() checkpoints and removes the WAL."""

    def __init__(self, path: Path, version: int = 30, *, schema: int | None = None) -> None:
        self.path = path
        self.conn = apsw.Connection(str(path))
        self.conn.execute("PRAGMA journal_mode = WAL").fetchall()
        with self.conn:
            self.conn.execute(schema_sql(version if schema is None else schema)).fetchall()
            self.conn.execute("INSERT INTO schema_version VALUES (?)", (version,)).fetchall()
        self._clock = 1_700_000_000.0

    def session(self, session_id: str, **columns: Any) -> str:
        """Insert a sessions row; ``source`` and ``started_at`` get defaults."""
        self._clock += 60
        row = {"id": session_id, "source": "cli", "started_at": self._clock, **columns}
        self._insert("sessions", row)
        return session_id

    def message(self, session_id: str, role: str, content: str | None, **columns: Any) -> int:
        """Insert a messages row and return its id; ``timestamp`` gets a default."""
        self._clock += 1
        row = {"session_id": session_id, "role": role, "content": content, **columns}
        row.setdefault("timestamp", self._clock)
        self._insert("messages", row)
        return int(self.conn.last_insert_rowid())

    def execute(self, sql: str, bindings: tuple[Any, ...] = ()) -> None:
        """Run one raw statement (for shapes the helpers do not cover)."""
        self.conn.execute(sql, bindings).fetchall()

    def _insert(self, table: str, row: dict[str, Any]) -> None:
        names = ", ".join(f'"{name}"' for name in row)
        marks = ", ".join("?" for _ in row)
        sql = f"INSERT INTO {table} ({names}) VALUES ({marks})"
        self.conn.execute(sql, tuple(row.values())).fetchall()

    def close(self) -> None:
        """Close the writer (SQLite checkpoints and deletes the WAL on last close)."""
        self.conn.close()

    def __enter__(self) -> HermesStateDb:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
