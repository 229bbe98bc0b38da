"""Read an existing Hermes Agent ``state.db`` without changing it, as typed legacy records.

This is the source side of ``hermes sessions import --from-hermes-db PATH``: it yields one
``LegacySession`` per ``sessions`` row (parents before children) and, per session, its
``LegacyMessage`` rows in stored order. Turning those into hermes_es events is the importer's job.

What the Hermes store looks like (NousResearch/hermes-agent, read from ``hermes_state_common.py``,
``hermes_state_schema.py`` and ``website/docs/developer-guide/session-storage.md``; facts
restated, no code copied):

- One SQLite file per profile, normally in WAL mode, written by several Hermes processes. A
  single-row ``schema_version(version INTEGER)`` table records the data-migration level. The
  newest published level we found is 30.
- Columns are *not* tied to version numbers any more: the schema module declares the full
  ``CREATE TABLE`` text and, on every writable open, adds any column the live table lacks
  (``ALTER TABLE ADD COLUMN``). The version only gates data migrations. So two files at the same
  version can have different columns, and this reader introspects ``PRAGMA table_info`` and treats
  an absent column as its Hermes default.
- Version history that matters here: 1 first schema (sessions, messages, FTS5); 2 adds
  ``messages.finish_reason``; 3 ``sessions.title``; 4 a unique index on non-NULL titles; 5 token
  and billing columns (``cache_read_tokens``, ``cache_write_tokens``, ``reasoning_tokens``,
  ``billing_*``, ``estimated_cost_usd``, ``actual_cost_usd``, ``cost_status``, ``cost_source``,
  ``pricing_version``); 6 ``reasoning``, ``reasoning_details``, ``codex_reasoning_items``; 7
  ``reasoning_content``; 8 ``sessions.api_call_count``; 9 ``codex_message_items``; 10-11 FTS5
  trigram and re-indexing; 16 subagent children tagged with ``$._delegate_from`` inside
  ``model_config``; 18 gateway metadata (``session_key``, ``chat_id``, ``display_name``,
  ``origin_json``, ``expiry_finalized``); **20** per-model usage: a ``session_model_usage`` table
  seeded from the per-session totals; 22 that table gains ``task`` in its primary key; 23
  external-content FTS (opt-in); **25** system prompts de-duplicated into
  ``system_prompts(hash, prompt)``: ``sessions.system_prompt_hash`` points there and the inline
  ``system_prompt`` is cleared (kept as a fallback for unmigrated rows); 29-30 cron and subagent
  rows leave the trigram index.
- ``sessions``: ``id`` TEXT primary key; ``source`` (``cli``, ``telegram``, ``cron``,
  ``subagent``, …) NOT NULL; ``user_id``; ``model``; ``model_config`` (JSON object text, also the
  home of lineage markers ``_branched_from`` / ``_delegate_from`` / ``_reset_from``);
  ``system_prompt`` / ``system_prompt_hash``; ``parent_session_id`` (self reference: compression,
  branch, delegate and reset children); ``started_at`` / ``ended_at`` (epoch-second REALs);
  ``end_reason`` (``compression``, ``branched``, ``new_session``, ``user_exit``, …);
  ``message_count``, ``tool_call_count``, ``api_call_count``; ``input_tokens``,
  ``output_tokens``, ``cache_read_tokens``, ``cache_write_tokens``, ``reasoning_tokens``; costs;
  ``title`` (unique when not NULL) and later ``title_source``; workspace ``cwd``, ``git_branch``,
  ``git_repo_root``; later flags ``archived``, ``pinned``, ``hidden`` (INTEGER 0/1, default 0),
  ``last_activity_at``, ``profile_name`` and many gateway/compression bookkeeping columns.
- ``messages``: ``id`` INTEGER AUTOINCREMENT (stored order; never reused); ``session_id``;
  ``role`` (``user``, ``assistant``, ``tool``, ``system``, plus ``session_meta`` bookkeeping
  rows); ``content`` (nullable text; empty for pure tool-call turns); ``tool_call_id`` and
  ``tool_name`` on tool results; ``tool_calls`` (JSON list of OpenAI-style call objects on
  assistant rows); ``timestamp`` (epoch REAL); ``token_count``; ``finish_reason``; ``reasoning``,
  ``reasoning_content``; JSON side-cars (``reasoning_details``, ``codex_*``); later ``active``
  (default 1) and ``compacted`` (default 0): live rows are ``active=1``; in-place compaction
  archives rows as ``active=0, compacted=1``; rewind/edit leaves ``active=0, compacted=0``. Later
  still: ``observed``, ``api_content``, ``display_*``, ``platform_message_id``.

How the file is opened, so that it is never written and no side files appear next to it: with no
(or an empty) ``-wal`` file the database is opened ``immutable=1`` (no locks, no ``-wal``/``-shm``
created; a plain read-only open of a WAL database was measured to create both and leave them
behind). With a non-empty ``-wal`` and its ``-shm``, a Hermes process is live or crashed, so the
file is opened ``mode=ro`` to see the WAL frames through the existing index. With a ``-wal`` but no
``-shm`` (a copied or half-restored profile), or a non-empty ``-journal`` (a rollback-mode crash,
whose half-written pages an immutable read would see), the file and that side file are copied to
a private temporary directory and the copy is recovered and read there; the copy is deleted on
``close()``. Every connection also sets ``query_only``.
"""

from __future__ import annotations

import heapq
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import apsw
import msgspec

from hermes_es.errors import StoreBusyError, ValidationError

MIN_SCHEMA_VERSION = 20
NEWEST_KNOWN_SCHEMA_VERSION = 30
BOOKKEEPING_ROLE = "session_meta"
_CONVERSATION_ROLES = frozenset({"system", "user", "assistant", "tool"})
_REQUIRED_COLUMNS = {
    "sessions": ("id", "started_at"),
    "messages": ("id", "session_id", "role"),
}
_BUSY_TIMEOUT_MS = 5000

Role = Literal["system", "user", "assistant", "tool", "session_meta"]
SQLiteValue = str | int | float | bytes | None
ExtraValue = str | int | float


class LegacySession(msgspec.Struct, frozen=True, kw_only=True):
    """One Hermes ``sessions`` row, with absent columns filled with Hermes' own defaults."""

    id: str
    """Hermes session id, kept verbatim."""
    source: str
    """Where the session ran: ``cli``, ``telegram``, ``cron``, ``subagent``, …"""
    started_at: float
    """Start time, Unix epoch seconds."""
    user_id: str | None = None
    """Principal on the other end (platform sender id, ``basic:alice``), if any."""
    model: str | None = None
    """Model name the session used."""
    model_config: dict[str, Any] = msgspec.field(default_factory=dict)
    """Decoded ``model_config`` JSON object (also carries Hermes lineage markers)."""
    system_prompt: str | None = None
    """Stored system prompt, resolved through ``system_prompts`` when only a hash is stored."""
    parent_session_id: str | None = None
    """Parent session; cleared (and reported) when the parent is missing or forms a cycle."""
    ended_at: float | None = None
    """End time, Unix epoch seconds, if ended."""
    end_reason: str | None = None
    """Why it ended (``compression``, ``branched``, ``user_exit``, …)."""
    title: str | None = None
    """Unique human title, if set."""
    title_source: str | None = None
    """Who chose the title (``user``, ``llm``, ``derived``, …), when recorded."""
    message_count: int = 0
    """Hermes' own counter of live messages."""
    tool_call_count: int = 0
    """Hermes' own counter of tool calls."""
    api_call_count: int = 0
    """Number of model API calls."""
    input_tokens: int = 0
    """Prompt tokens over the session."""
    output_tokens: int = 0
    """Completion tokens over the session."""
    cache_read_tokens: int = 0
    """Prompt-cache read tokens."""
    cache_write_tokens: int = 0
    """Prompt-cache write tokens."""
    reasoning_tokens: int = 0
    """Reasoning tokens."""
    estimated_cost_usd: float | None = None
    """Hermes' cost estimate in USD."""
    actual_cost_usd: float | None = None
    """Billed cost in USD, when the provider reported one."""
    billing_provider: str | None = None
    """Billing provider name."""
    cwd: str | None = None
    """Working directory the session ran in."""
    git_branch: str | None = None
    """Git branch of the workspace."""
    git_repo_root: str | None = None
    """Git repository root of the workspace."""
    pinned: bool = False
    """Pinned (exempt from pruning)."""
    archived: bool = False
    """Archived (hidden from lists until unarchived)."""
    hidden: bool = False
    """Hidden from pickers."""
    last_activity_at: float | None = None
    """Last recorded activity, Unix epoch seconds."""
    profile_name: str | None = None
    """Hermes profile the session belongs to."""
    extra: dict[str, ExtraValue] = msgspec.field(default_factory=dict)
    """Every other non-NULL column, verbatim (BLOBs as hex text), so nothing is lost."""


class LegacyMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One Hermes ``messages`` row, in stored order."""

    row_id: int
    """Hermes ``messages.id`` (AUTOINCREMENT, the stored order)."""
    session_id: str
    """Owning session id."""
    role: Role
    """Conversation role; ``session_meta`` only when bookkeeping rows are asked for."""
    content: str
    """Text content; empty when Hermes stored NULL."""
    timestamp: float
    """Unix epoch seconds."""
    tool_calls: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """Decoded tool-call objects of an assistant turn."""
    tool_call_id: str | None = None
    """Call id a tool result answers."""
    tool_name: str | None = None
    """Tool that produced a tool result."""
    token_count: int | None = None
    """Token count Hermes recorded for the row."""
    finish_reason: str | None = None
    """Model finish reason (``stop``, ``tool_calls``, …)."""
    reasoning: str | None = None
    """Raw reasoning text."""
    reasoning_content: str | None = None
    """Provider ``reasoning_content`` text."""
    active: bool = True
    """Part of the live transcript (absent column: every row is live)."""
    compacted: bool = False
    """Archived by in-place compaction (``active`` is then false)."""
    extra: dict[str, ExtraValue] = msgspec.field(default_factory=dict)
    """Every other non-NULL column verbatim, plus raw text of fields that failed to decode."""

    @property
    def status(self) -> Literal["live", "compacted", "rewound"]:
        """Live, archived by compaction, or undone by rewind/edit."""
        if self.active:
            return "live"
        return "compacted" if self.compacted else "rewound"


class HermesDbCounts(msgspec.Struct, frozen=True, kw_only=True):
    """Row counts of the source file, for the import report."""

    sessions: int
    """Rows in ``sessions``."""
    messages: int
    """Rows in ``messages`` (all states, bookkeeping and orphans included)."""
    messages_by_role: dict[str, int]
    """``messages`` rows per stored role."""
    live_messages: int
    """Rows in the live transcript (``active=1``)."""
    compacted_messages: int
    """Rows archived by compaction."""
    rewound_messages: int
    """Rows undone by rewind or edit."""
    orphan_messages: int
    """Rows whose session id is not in ``sessions`` (never yielded)."""


def parents_first(parents: Mapping[str, str | None]) -> tuple[list[str], dict[str, str]]:
    """Order ids so each parent precedes its children; return the order and the links cut.

    ``parents`` maps id → parent id, in the preferred order for ties. A link is cut (id → reason)
    when the parent is unknown or the link closes a cycle; the cut id is then ordered as a root.
    """
    position = {node: index for index, node in enumerate(parents)}
    children: dict[str, list[str]] = {node: [] for node in parents}
    cut: dict[str, str] = {}
    ready: list[int] = []
    for node, parent in parents.items():
        if parent is None:
            ready.append(position[node])
        elif parent not in parents:
            cut[node] = f"names parent {parent!r}, which is not in the file"
            ready.append(position[node])
        else:
            children[parent].append(node)
    nodes = list(parents)
    order: list[str] = []
    emitted: set[str] = set()
    heapq.heapify(ready)
    while len(order) < len(nodes):
        if not ready:
            victim = _cycle_member_to_cut(parents, emitted, nodes, position)
            cut[victim] = f"closes a parent cycle through {parents[victim]!r}"
            ready.append(position[victim])
        node = nodes[heapq.heappop(ready)]
        order.append(node)
        emitted.add(node)
        for child in children[node]:
            if child not in cut:
                heapq.heappush(ready, position[child])
    return order, cut


def _cycle_member_to_cut(
    parents: Mapping[str, str | None],
    emitted: set[str],
    nodes: list[str],
    position: Mapping[str, int],
) -> str:
    """Earliest member of a cycle among the not-yet-emitted ids (all of which hang off cycles)."""
    node = next(n for n in nodes if n not in emitted)
    seen: list[str] = []
    while node not in seen:
        seen.append(node)
        node = cast(str, parents[node])
    cycle = seen[seen.index(node) :]
    return min(cycle, key=position.__getitem__)


class _RowReader:
    """Typed, reporting access to one row; remembers which columns were consumed."""

    def __init__(self, row: dict[str, SQLiteValue], where: str, report: Callable[[str], None]):
        self._row = row
        self._where = where
        self._report = report
        self._used: set[str] = set()
        self._raw_kept: dict[str, ExtraValue] = {}

    def consume(self, *columns: str) -> None:
        """Mark columns as already handled so they stay out of ``extra``."""
        self._used.update(columns)

    def _get(self, column: str) -> SQLiteValue:
        self._used.add(column)
        return self._row.get(column)

    def text(self, column: str) -> str | None:
        """Column as text (numbers are stringified, BLOBs decoded as UTF-8 and reported)."""
        value = self._get(column)
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, bytes):
            self._report(f"{self._where}: {column} is binary, decoded as UTF-8 with replacements")
            return value.decode("utf-8", errors="replace")
        return str(value)

    def number(self, column: str) -> float | None:
        """Column as a float, or None when NULL or not numeric (reported)."""
        value = self._get(column)
        if value is None:
            return None
        try:
            return float(value)
        except (TypeError, ValueError):
            self._report(f"{self._where}: {column} holds {value!r}, not a number; ignored")
            self._keep_raw(column, value)
            return None

    def integer(self, column: str, default: int) -> int:
        """Column as an int, or ``default`` when NULL or not integral (reported)."""
        found = self.optional_integer(column)
        return default if found is None else found

    def optional_integer(self, column: str) -> int | None:
        """Column as an int, or None when NULL or not integral (reported)."""
        value = self._get(column)
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = float("nan")
        if number.is_integer():
            return int(number)
        self._report(f"{self._where}: {column} holds {value!r}, not an integer; ignored")
        self._keep_raw(column, value)
        return None

    def flag(self, column: str, default: bool) -> bool:
        """Column as a 0/1 flag; NULL or absent gives ``default``."""
        found = self.optional_integer(column)
        return default if found is None else found != 0

    def json_object(self, column: str) -> dict[str, Any]:
        """Column decoded as a JSON object; bad JSON is reported and kept raw in ``extra``."""
        decoded = self._json(column)
        if decoded is None:
            return {}
        if isinstance(decoded, dict):
            return decoded
        self._report(f"{self._where}: {column} is JSON but not an object; field dropped")
        self._keep_raw(column, self._row[column])
        return {}

    def json_list_of_objects(self, column: str) -> list[dict[str, Any]]:
        """Column decoded as a JSON list of objects; anything else is reported, kept raw."""
        decoded = self._json(column)
        if decoded is None:
            return []
        if isinstance(decoded, dict):
            decoded = [decoded]
        if isinstance(decoded, list) and all(isinstance(item, dict) for item in decoded):
            return decoded
        self._report(f"{self._where}: {column} is JSON but not a list of objects; field dropped")
        self._keep_raw(column, self._row[column])
        return []

    def _json(self, column: str) -> Any:
        raw = self.text(column)
        if raw is None or not raw.strip():
            return None
        try:
            return msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            self._report(f"{self._where}: {column} is not valid JSON ({exc}); field dropped")
            self._keep_raw(column, raw)
            return None

    def _keep_raw(self, column: str, value: SQLiteValue) -> None:
        if value is not None:
            self._raw_kept[column] = _extra_value(value)

    def extra(self) -> dict[str, ExtraValue]:
        """Unconsumed non-NULL columns plus raw values of fields that failed to decode."""
        rest = {
            name: _extra_value(value)
            for name, value in self._row.items()
            if name not in self._used and value is not None
        }
        return {**rest, **self._raw_kept}


def _non_empty(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def _extra_value(value: str | int | float | bytes) -> ExtraValue:
    return value.hex() if isinstance(value, bytes) else value


class HermesDb:
    """A Hermes ``state.db`` opened strictly read-only; iterate sessions and messages."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.skipped: list[str] = []
        """Human-readable problems: rows or fields not imported, links cut."""
        self.notes: list[str] = []
        """Observations that lose nothing (open mode, newer schema than known)."""
        self._reported: set[str] = set()
        self._session_starts: dict[str, float] = {}
        self._snapshot_dir: tempfile.TemporaryDirectory[str] | None = None
        self._conn: apsw.Connection | None = None
        try:
            self._conn, self.open_mode = self._open()
            self.schema_version = self._check_schema()
            self.session_columns = self._columns("sessions")
            self.message_columns = self._columns("messages")
            self._message_layout = MessageColumns(sorted(self.message_columns))
            # CAST: a bare ``= ?`` let the planner test the bound id against the file's
            # partial indexes, which made SQLite prepare the statement again at every session
            self._messages_sql = self._select(
                "messages", self.message_columns, "WHERE session_id = CAST(? AS TEXT) ORDER BY id"
            )
            self._check_required_columns()
            self._report_orphan_messages()
        except BaseException:
            self.close()
            raise

    # -- opening ---------------------------------------------------------------------------

    def _open(self) -> tuple[apsw.Connection, str]:
        if not self.path.is_file():
            raise ValidationError(f"{self.path}: no such file", subject=str(self.path))
        wal, shm, journal = (self._sidecar(suffix) for suffix in ("-wal", "-shm", "-journal"))
        if _non_empty(journal):
            return self._open_snapshot(journal, "a hot rollback journal"), "snapshot"
        if not _non_empty(wal):
            return self._connect(self.path, "immutable=1"), "immutable"
        if shm.exists():
            self.notes.append(f"{wal.name} is present: read through it without writing")
            return self._connect(self.path, "mode=ro"), "read-only"
        return self._open_snapshot(wal, f"{wal.name} but no {shm.name}"), "snapshot"

    def _sidecar(self, suffix: str) -> Path:
        return self.path.with_name(self.path.name + suffix)

    def _open_snapshot(self, sidecar: Path, why: str) -> apsw.Connection:
        """Copy the file and one sidecar to a private directory and open the copy there."""
        self._snapshot_dir = tempfile.TemporaryDirectory(prefix="hermes-import-")
        copy = Path(self._snapshot_dir.name) / "state.db"
        shutil.copyfile(self.path, copy)
        shutil.copyfile(sidecar, copy.with_name("state.db" + sidecar.name[len(self.path.name) :]))
        self.notes.append(f"{self.path.name} has {why}: read a private copy, source untouched")
        # The copy may need recovery (WAL index, journal rollback), so it is opened writable.
        return self._connect(copy, "mode=rw")

    def _connect(self, path: Path, uri_option: str) -> apsw.Connection:
        uri = f"{path.resolve().as_uri()}?{uri_option}"
        flags = apsw.SQLITE_OPEN_URI | (
            apsw.SQLITE_OPEN_READWRITE if uri_option == "mode=rw" else apsw.SQLITE_OPEN_READONLY
        )
        try:
            conn = apsw.Connection(uri, flags=flags)
            conn.setbusytimeout(_BUSY_TIMEOUT_MS)
            conn.execute("PRAGMA query_only = 1").fetchall()
        except apsw.Error as exc:
            raise self._translate(exc) from exc
        return conn

    def _translate(self, exc: apsw.Error) -> Exception:
        where = str(self.path)
        if isinstance(exc, apsw.BusyError):
            return StoreBusyError(f"{where} stayed locked by another process", subject=where)
        if isinstance(exc, apsw.NotADBError | apsw.CorruptError):
            return ValidationError(f"{where} is not a readable SQLite database", subject=where)
        return ValidationError(f"{where} could not be read: {exc}", subject=where)

    def _live(self) -> apsw.Connection:
        if self._conn is None:
            raise ValidationError(f"{self.path} is already closed", subject=str(self.path))
        return self._conn

    def _query(self, sql: str, bindings: tuple[SQLiteValue, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return list(self._live().execute(sql, bindings))
        except apsw.Error as exc:
            raise self._translate(exc) from exc

    # -- schema ----------------------------------------------------------------------------

    def _check_schema(self) -> int:
        tables = {name for (name,) in self._query("SELECT name FROM sqlite_master")}
        missing = sorted({"schema_version", "sessions", "messages"} - tables)
        if missing:
            raise ValidationError(
                f"{self.path} is not a Hermes Agent state.db: missing table(s) "
                + ", ".join(missing),
                subject=str(self.path),
            )
        self._has_prompt_table = "system_prompts" in tables
        version = self._query("SELECT MAX(version) FROM schema_version")[0][0]
        if not isinstance(version, int):
            raise ValidationError(
                f"{self.path}: schema_version holds no version number", subject=str(self.path)
            )
        if version < MIN_SCHEMA_VERSION:
            raise ValidationError(
                f"{self.path} is a Hermes state.db at schema version {version}; import needs "
                f"version {MIN_SCHEMA_VERSION} or newer (open it once with a current Hermes)",
                subject=str(self.path),
            )
        if version > NEWEST_KNOWN_SCHEMA_VERSION:
            self.notes.append(
                f"schema version {version} is newer than {NEWEST_KNOWN_SCHEMA_VERSION}, the newest "
                "this reader knows; unknown columns are carried in extra"
            )
        return version

    def _columns(self, table: str) -> frozenset[str]:
        return frozenset(row[1] for row in self._query(f'PRAGMA table_info("{table}")'))

    def _check_required_columns(self) -> None:
        for table, required in _REQUIRED_COLUMNS.items():
            present = self.session_columns if table == "sessions" else self.message_columns
            absent = [column for column in required if column not in present]
            if absent:
                raise ValidationError(
                    f"{self.path}: table {table} lacks column(s) {', '.join(absent)}",
                    subject=str(self.path),
                )

    def _report_orphan_messages(self) -> None:
        count, example = self._query(
            "SELECT COUNT(*), MIN(session_id) FROM messages m "
            "WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = m.session_id)"
        )[0]
        if count:
            self._report(
                f"{count} message row(s) belong to session ids not in the sessions table "
                f"(first: {example!r}); not imported"
            )

    def _report(self, problem: str) -> None:
        if problem not in self._reported:
            self._reported.add(problem)
            self.skipped.append(problem)

    def _select(self, table: str, columns: frozenset[str], tail: str) -> str:
        names = ", ".join(f'"{name}"' for name in sorted(columns))
        return f'SELECT {names} FROM "{table}" {tail}'

    # -- sessions --------------------------------------------------------------------------

    def sessions(self) -> Iterator[LegacySession]:
        """Every session, parents before children, earliest first among equals."""
        loaded = self._load_sessions()
        order, cut = parents_first({s.id: s.parent_session_id for s in loaded})
        by_id = {session.id: session for session in loaded}
        for session_id in order:
            session = by_id[session_id]
            if session_id in cut:
                self._report(f"session {session_id}: {cut[session_id]}; imported without parent")
                session = msgspec.structs.replace(session, parent_session_id=None)
            yield session

    def _load_sessions(self) -> list[LegacySession]:
        columns = self.session_columns
        sql = self._select("sessions", columns, "ORDER BY started_at, id")
        names = sorted(columns)
        loaded: list[LegacySession] = []
        for values in self._query(sql):
            row = dict(zip(names, values, strict=True))
            session = self._session_from_row(row)
            if session is not None:
                loaded.append(session)
                self._session_starts[session.id] = session.started_at
        return loaded

    def _session_from_row(self, row: dict[str, SQLiteValue]) -> LegacySession | None:
        session_id = row.get("id")
        if not isinstance(session_id, str) or not session_id:
            self._report(f"session row with id {session_id!r}: no usable id; not imported")
            return None
        read = _RowReader(row, f"session {session_id}", self._report)
        read.consume("id")
        started_at = read.number("started_at")
        if started_at is None:
            self._report(f"session {session_id}: no usable started_at; used 0")
        return LegacySession(
            id=session_id,
            source=read.text("source") or "unknown",
            started_at=started_at or 0.0,
            user_id=read.text("user_id"),
            model=read.text("model"),
            model_config=read.json_object("model_config"),
            system_prompt=self._system_prompt(read, session_id),
            parent_session_id=read.text("parent_session_id") or None,
            ended_at=read.number("ended_at"),
            end_reason=read.text("end_reason"),
            title=read.text("title"),
            title_source=read.text("title_source"),
            message_count=read.integer("message_count", 0),
            tool_call_count=read.integer("tool_call_count", 0),
            api_call_count=read.integer("api_call_count", 0),
            input_tokens=read.integer("input_tokens", 0),
            output_tokens=read.integer("output_tokens", 0),
            cache_read_tokens=read.integer("cache_read_tokens", 0),
            cache_write_tokens=read.integer("cache_write_tokens", 0),
            reasoning_tokens=read.integer("reasoning_tokens", 0),
            estimated_cost_usd=read.number("estimated_cost_usd"),
            actual_cost_usd=read.number("actual_cost_usd"),
            billing_provider=read.text("billing_provider"),
            cwd=read.text("cwd"),
            git_branch=read.text("git_branch"),
            git_repo_root=read.text("git_repo_root"),
            pinned=read.flag("pinned", False),
            archived=read.flag("archived", False),
            hidden=read.flag("hidden", False),
            last_activity_at=read.number("last_activity_at"),
            profile_name=read.text("profile_name"),
            extra=read.extra(),
        )

    def _system_prompt(self, read: _RowReader, session_id: str) -> str | None:
        inline = read.text("system_prompt")
        prompt_hash = read.text("system_prompt_hash")
        if inline is not None or prompt_hash is None:
            return inline
        if self._has_prompt_table:
            rows = self._query("SELECT prompt FROM system_prompts WHERE hash = ?", (prompt_hash,))
            prompt = rows[0][0] if rows else None
            if isinstance(prompt, str):
                return prompt
        self._report(
            f"session {session_id}: system prompt hash {prompt_hash} has no stored prompt; "
            "imported without a system prompt"
        )
        return None

    # -- messages --------------------------------------------------------------------------

    def messages(
        self, session_id: str, *, include_bookkeeping: bool = False
    ) -> Iterator[LegacyMessage]:
        """The session's messages in stored order; unknown roles and bookkeeping are reported."""
        columns = self._message_layout
        fallback_time = self._session_start(session_id)
        bookkeeping = 0
        role_at = columns.role
        try:
            cursor = self._live().execute(self._messages_sql, (session_id,))
            for values in cursor:
                if (
                    role_at is not None
                    and values[role_at] == BOOKKEEPING_ROLE
                    and not include_bookkeeping
                ):
                    bookkeeping += 1
                    continue
                message = _plain_message(values, columns, session_id)
                if message is None:
                    row = dict(zip(columns.names, values, strict=True))
                    message = self._message_from_row(row, session_id, fallback_time)
                if message is not None:
                    yield message
        except apsw.Error as exc:
            raise self._translate(exc) from exc
        if bookkeeping:
            self._report(
                f"session {session_id}: {bookkeeping} Hermes bookkeeping row(s) "
                f"(role {BOOKKEEPING_ROLE!r}) not imported"
            )

    def _session_start(self, session_id: str) -> float:
        if session_id not in self._session_starts:
            rows = self._query("SELECT started_at FROM sessions WHERE id = ?", (session_id,))
            start = rows[0][0] if rows else None
            self._session_starts[session_id] = float(start) if isinstance(start, int | float) else 0
        return self._session_starts[session_id]

    def _message_from_row(
        self, row: dict[str, SQLiteValue], session_id: str, fallback_time: float
    ) -> LegacyMessage | None:
        row_id = cast(int, row["id"])
        where = f"message row {row_id} in session {session_id}"
        role = row.get("role")
        if role not in _CONVERSATION_ROLES and role != BOOKKEEPING_ROLE:
            self._report(f"{where}: unknown role {role!r}; not imported")
            return None
        read = _RowReader(row, where, self._report)
        read.consume("id", "session_id", "role")
        timestamp = read.number("timestamp")
        if timestamp is None:
            self._report(f"{where}: no usable timestamp; used the session start")
        return LegacyMessage(
            row_id=row_id,
            session_id=session_id,
            role=cast(Role, role),
            content=read.text("content") or "",
            timestamp=fallback_time if timestamp is None else timestamp,
            tool_calls=read.json_list_of_objects("tool_calls"),
            tool_call_id=read.text("tool_call_id"),
            tool_name=read.text("tool_name"),
            token_count=read.optional_integer("token_count"),
            finish_reason=read.text("finish_reason"),
            reasoning=read.text("reasoning"),
            reasoning_content=read.text("reasoning_content"),
            active=read.flag("active", True),
            compacted=read.flag("compacted", False),
            extra=read.extra(),
        )

    # -- counts and lifetime ---------------------------------------------------------------

    def counts(self) -> HermesDbCounts:
        """Row counts of the source file, by role and transcript state."""
        by_role = {
            str(role): count
            for role, count in self._query("SELECT role, COUNT(*) FROM messages GROUP BY role")
        }
        total = sum(by_role.values())
        active = "active" in self.message_columns
        compacted = "compacted" in self.message_columns
        live = self._count("COALESCE(active, 1) <> 0") if active else total
        archived = self._count("COALESCE(active, 1) = 0 AND compacted <> 0") if compacted else 0
        return HermesDbCounts(
            sessions=self._query("SELECT COUNT(*) FROM sessions")[0][0],
            messages=total,
            messages_by_role=by_role,
            live_messages=live,
            compacted_messages=archived,
            rewound_messages=total - live - archived,
            orphan_messages=self._query(
                "SELECT COUNT(*) FROM messages m "
                "WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = m.session_id)"
            )[0][0],
        )

    def _count(self, where: str) -> int:
        return cast(int, self._query(f"SELECT COUNT(*) FROM messages WHERE {where}")[0][0])

    def close(self) -> None:
        """Close the connection and drop any private snapshot copy."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._snapshot_dir is not None:
            self._snapshot_dir.cleanup()
            self._snapshot_dir = None

    def __enter__(self) -> HermesDb:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_MESSAGE_TEXT = ("content", "tool_call_id", "tool_name", "finish_reason", "reasoning",
                 "reasoning_content")  # fmt: skip
_MESSAGE_FIELDS = frozenset(
    {"id", "session_id", "role", "timestamp", "tool_calls", "token_count", "active", "compacted",
     *_MESSAGE_TEXT}
)  # fmt: skip
"""The ``messages`` columns ``LegacyMessage`` has a field for (the rest go to ``extra``)."""


class MessageColumns:
    """Where each ``messages`` column a ``LegacyMessage`` field reads sits in a selected row
    (None: the file has no such column), and the other columns (``extra``): a row is read
    by position, without a dict per row."""

    __slots__ = ("active", "compacted", "extra", "id", "names", "plain", "role", "text",
                 "timestamp", "token_count", "tool_calls")  # fmt: skip

    def __init__(self, names: Sequence[str]) -> None:
        where = {name: i for i, name in enumerate(names)}
        self.names = tuple(names)
        self.id = where.get("id")
        self.role = where.get("role")
        self.timestamp = where.get("timestamp")
        self.token_count = where.get("token_count")
        self.active = where.get("active")
        self.compacted = where.get("compacted")
        self.tool_calls = where.get("tool_calls")
        self.text = tuple(where.get(name) for name in _MESSAGE_TEXT)
        """Positions of ``_MESSAGE_TEXT``, in that order."""
        self.extra = tuple((i, n) for i, n in enumerate(names) if n not in _MESSAGE_FIELDS)
        self.plain = self.id is not None and self.role is not None and self.timestamp is not None
        """Whether rows can be read in one pass at all (else every row takes the checked path)."""


def _plain_message(
    values: Sequence[SQLiteValue], columns: MessageColumns, session_id: str
) -> LegacyMessage | None:
    """The message of a row (``values`` in ``columns`` order) whose every field has its usual
    type, or None.

    Most rows hold text or NULL in the text columns, a number in ``timestamp``, integers or
    NULL in the counts and flags, and a JSON list of objects (or nothing) in ``tool_calls``:
    those are read here in one pass, the same values ``_RowReader`` would give. Any other row
    (NULL timestamp, a BLOB, a number in a text column, bad JSON, an unknown role) is left to
    the checked path, which reports what it changes.
    """
    if not columns.plain:
        return None
    role = values[columns.role]  # type: ignore[index]
    if role not in _CONVERSATION_ROLES:
        return None
    text: list[str | None] = []
    for i in columns.text:
        value = None if i is None else values[i]
        if value is not None and type(value) is not str:
            return None
        text.append(value)
    timestamp = values[columns.timestamp]  # type: ignore[index]
    if type(timestamp) is not float and type(timestamp) is not int:
        return None
    numbers = []
    for i in (columns.token_count, columns.active, columns.compacted):
        number = None if i is None else values[i]
        if number is not None and type(number) is not int:
            return None
        numbers.append(number)
    token_count, active, compacted = numbers
    calls: list[dict[str, Any]] = []
    raw = None if columns.tool_calls is None else values[columns.tool_calls]
    if raw is not None:
        if type(raw) is not str:
            return None
        if raw.strip():
            try:
                decoded = msgspec.json.decode(raw)
            except msgspec.DecodeError:
                return None
            if isinstance(decoded, dict):
                decoded = [decoded]
            if not isinstance(decoded, list) or not all(isinstance(c, dict) for c in decoded):
                return None
            calls = decoded
    extra = {
        name: _extra_value(value) for i, name in columns.extra if (value := values[i]) is not None
    }
    content, tool_call_id, tool_name, finish_reason, reasoning, reasoning_content = text
    return LegacyMessage(
        row_id=cast(int, values[columns.id]),  # type: ignore[index]
        session_id=session_id,
        role=cast(Role, role),
        content=content or "",
        timestamp=float(timestamp),
        tool_calls=calls,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        token_count=token_count,
        finish_reason=finish_reason,
        reasoning=reasoning,
        reasoning_content=reasoning_content,
        active=True if active is None else active != 0,
        compacted=False if compacted is None else compacted != 0,
        extra=extra,
    )


def read_hermes_db(path: str | os.PathLike[str]) -> HermesDb:
    """Open a Hermes Agent state.db read-only; refuse versions below 20 or missing tables."""
    return HermesDb(Path(path))
