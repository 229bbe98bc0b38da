"""``hermes doctor``: check a profile's store and config and say what to do about each problem.

Every check yields ``Finding`` rows. ``error`` means something is wrong (the store is damaged,
projections lag the log, the config cannot be loaded); ``warning`` means hermes works but not
the way the config or environment suggests (unknown keys, legacy reset settings, a large WAL,
degraded stored prompts). The CLI exits 1 on errors, and on warnings too with ``--strict``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import apsw
import msgspec

from hermes_es.config import LoadedConfig, legacy_reset_findings, load_config
from hermes_es.errors import ConfigError
from hermes_es.home import CONFIG_NAME, STATE_DB_NAME

Level = Literal["ok", "info", "warning", "error", "skipped"]

WAL_WARN_BYTES = 64 * 1024 * 1024
"""A write-ahead log larger than this is reported (it normally shrinks at each checkpoint)."""

REBUILD_FIX = "run 'hermes sessions rebuild-projections' to rebuild the read models from the log"


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One result of one check."""

    check: str
    """Dotted name of the check, e.g. ``store.integrity``."""
    level: Level
    message: str
    fix: str = ""
    """What to do about it (empty when nothing needs doing)."""


class DoctorReport(msgspec.Struct, frozen=True, kw_only=True):
    """Every finding for one profile."""

    profile_dir: str
    db_path: str
    config_path: str
    findings: list[Finding]

    @property
    def errors(self) -> int:
        """How many findings are errors."""
        return sum(1 for f in self.findings if f.level == "error")

    @property
    def warnings(self) -> int:
        """How many findings are warnings."""
        return sum(1 for f in self.findings if f.level == "warning")

    def exit_code(self, *, strict: bool = False) -> int:
        """1 when something is wrong (an error, or with ``strict`` also a warning), else 0."""
        return 1 if self.errors or (strict and self.warnings) else 0


def run_doctor(
    profile_dir: Path, environ: Mapping[str, str], *, full: bool = False
) -> DoctorReport:
    """Check the store and the config of the profile living in ``profile_dir``."""
    db_path = profile_dir / STATE_DB_NAME
    config_path = profile_dir / CONFIG_NAME
    findings = [
        *check_store(db_path, full=full),
        check_tokenizer(),
        *check_config(config_path, environ),
    ]
    return DoctorReport(
        profile_dir=str(profile_dir),
        db_path=str(db_path),
        config_path=str(config_path),
        findings=findings,
    )


# --- store -----------------------------------------------------------------------------------


def check_store(db_path: Path, *, full: bool = False) -> list[Finding]:
    """Integrity, projections vs log, event decoding, FTS index, WAL size, holders, prompts.

    The store is opened read-only: doctor never migrates or writes it, and works on a store
    the user may only read. Only the search-index content check takes the write lock, in a
    transaction of its own, when the store is writable.
    """
    if not db_path.exists():
        return [
            Finding(
                check="store",
                level="info",
                message=f"no store yet at {db_path}; it is created by the first session",
            )
        ]
    from hermes_es.projections.fts import register_tokenizer
    from hermes_es.store.db import open_reader

    wal = _wal(db_path)  # before opening: the last connection to close truncates the WAL
    try:
        conn = open_reader(db_path, hooks=[register_tokenizer])
    except apsw.Error as exc:
        return [
            Finding(
                check="store.open",
                level="error",
                message=f"cannot open {db_path}: {type(exc).__name__}: {exc}",
                fix="restore state.db from a backup; keep the damaged file for inspection",
            )
        ]
    try:
        checks: list[Callable[[], Iterator[Finding]]] = [
            lambda: _integrity(conn, full),
            lambda: _projections(conn),
            lambda: _events(conn, full),
            lambda: _fts(db_path),
            lambda: _prompts(conn),
            lambda: _leftovers(conn, db_path),
        ]
        findings = [f for check in checks for f in _guarded(check)]
    finally:
        conn.close()
    if full:
        findings.extend(_guarded(lambda: _verify(db_path)))
    return [*findings, _scrub(db_path), wal, _holders(db_path)]


def _leftovers(conn: apsw.Connection, db_path: Path) -> Iterator[Finding]:
    """Tables or scratch files an interrupted rebuild or verify left (copies of text)."""
    from hermes_es.projections.leftovers import (
        leftover_tables,
        rebuild_running,
        stale_scratch_files,
    )

    tables = leftover_tables(conn)
    files = stale_scratch_files(db_path)
    if not tables and not files:
        return
    if tables and rebuild_running(db_path):
        yield Finding(
            check="store.leftovers",
            level="info",
            message=f"a rebuild-projections is running ({len(tables)} tables being built)",
        )
        tables = []
    if tables or files:
        what = []
        if tables:
            what.append(f"{len(tables)} rebuild_* table(s)")
        if files:
            what.append(f"{len(files)} .verify-* scratch file(s)")
        yield Finding(
            check="store.leftovers",
            level="warning",
            message=f"an interrupted rebuild or verify left {' and '.join(what)} holding "
            "copies of session text",
            fix="run any hermes command that writes (e.g. 'hermes sessions optimize'): the "
            "store removes them, zeroed, when it is next opened for writing",
        )


def _scrub(db_path: Path) -> Finding:
    """Whether a delete's scrub is still pending (another process's snapshot blocked it)."""
    import datetime as dt

    from hermes_es.store.scrub import pending_scrub

    entry = pending_scrub(db_path)
    if entry is None:
        return Finding(
            check="store.scrub", level="ok", message="no deleted text is waiting to be scrubbed"
        )
    since = (
        dt.datetime.fromtimestamp(entry.since).strftime("%Y-%m-%d %H:%M")
        if entry.since
        else "an unknown time"
    )
    return Finding(
        check="store.scrub",
        level="warning",
        message=f"a delete ({entry.reason}) at {since} is not yet scrubbed from disk: another "
        "process held a read snapshot, so old copies of the deleted pages stay in state.db "
        "and its WAL until it lets go",
        fix="close idle hermes processes (see store.holders); the scrub then finishes by "
        "itself, or run 'hermes sessions optimize'",
    )


def _guarded(check: Callable[[], Iterator[Finding]]) -> list[Finding]:
    """Run one check; a SQLite failure inside it becomes an error finding."""
    try:
        return list(check())
    except apsw.Error as exc:
        return [
            Finding(
                check="store",
                level="error",
                message=f"reading the store failed: {type(exc).__name__}: {exc}",
                fix="run 'hermes doctor --full'; restore state.db from a backup if it is damaged",
            )
        ]


def _integrity(conn: apsw.Connection, full: bool) -> Iterator[Finding]:
    """SQLite's quick_check (integrity_check with ``full``)."""
    from hermes_es.queries.health import integrity_problems

    kind = "integrity_check" if full else "quick_check"
    problems = integrity_problems(conn, full=full)
    if not problems:
        yield Finding(check="store.integrity", level="ok", message=f"SQLite {kind}: ok")
        return
    listed = "; ".join(problems[:5]) + (
        f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
    )
    yield Finding(
        check="store.integrity",
        level="error",
        message=f"SQLite {kind} found {len(problems)} problem(s): {listed}",
        fix=_integrity_fix(problems),
    )


def _integrity_fix(problems: list[str]) -> str:
    """Advice for integrity problems: indexes can be rebuilt in place, pages cannot."""
    if all(" index " in problem for problem in problems):
        return "only indexes are damaged: stop every hermes process, then run REINDEX on state.db"
    return (
        "stop every hermes process, copy state.db aside, then restore it from a backup "
        "(the event log is the source of truth; projections can be rebuilt from it)"
    )


def _projections(conn: apsw.Connection) -> Iterator[Finding]:
    """Whether the read models have applied every event in the log.

    The log head and the projections' position are read in one read transaction: a writer
    committing between the two reads would otherwise look like projections falling behind.
    """
    from hermes_es.projections.catalog import SCHEMA_VERSION, get_position
    from hermes_es.queries.health import log_head
    from hermes_es.store.db import read_transaction

    with read_transaction(conn):
        layout = int(conn.execute("PRAGMA user_version").fetchall()[0][0])
        if layout != SCHEMA_VERSION:
            yield Finding(
                check="store.projections",
                level="info",
                message=f"projections have layout {layout} (this hermes uses {SCHEMA_VERSION});"
                " the next hermes command that opens the store rebuilds them from the log",
            )
            return
        position, head = get_position(conn), log_head(conn)
    if position == head:
        yield Finding(
            check="store.projections",
            level="ok",
            message=f"projections are in step with the log (event {head})",
        )
    else:
        state = "behind" if position < head else "ahead of"
        yield Finding(
            check="store.projections",
            level="error",
            message=f"projections are at event {position}, {state} the log head {head}",
            fix=REBUILD_FIX,
        )


DECODE_BUDGET_SECONDS = 1.0
"""How long plain doctor spends decoding events, newest first (``--full`` decodes them all)."""


def _events(conn: apsw.Connection, full: bool) -> Iterator[Finding]:
    """Whether stored events decode: all of them with ``full``, else the newest first."""
    from hermes_es.queries.health import decode_problem

    check = decode_problem(conn, budget=None if full else DECODE_BUDGET_SECONDS)
    if check.error is not None:
        yield Finding(
            check="store.events",
            level="error",
            message=check.error.message,
            fix="run 'hermes sessions history "
            f"{check.error.stream}' to see the stream; restore state.db from a backup",
        )
    elif check.checked < check.total:
        yield Finding(
            check="store.events",
            level="info",
            message=f"the newest {check.checked} of {check.total} events decode; older ones "
            "were not checked",
            fix="run 'hermes doctor --full' to decode every event",
        )
    else:
        yield Finding(
            check="store.events", level="ok", message=f"all {check.total} stored events decode"
        )


def _verify(db_path: Path) -> Iterator[Finding]:
    """Rebuild into a scratch database and compare every projection table."""
    from hermes_es.projections.rebuild import verify
    from hermes_es.store.decoding import CorruptEventError

    try:
        diffs = verify(db_path)
    except CorruptEventError as exc:
        yield Finding(
            check="store.verify",
            level="error",
            message=f"the log cannot be replayed: {exc.message}",
            fix="restore state.db from a backup",
        )
        return
    bad = [d for d in diffs if not d.equal]
    if not bad:
        yield Finding(
            check="store.verify", level="ok", message="every projection table matches the log"
        )
        return
    tables = ", ".join(f"{d.table} (live {d.live_rows}, rebuilt {d.rebuilt_rows})" for d in bad)
    yield Finding(
        check="store.verify",
        level="error",
        message=f"{len(bad)} projection table(s) differ from a replay of the log: {tables}",
        fix=REBUILD_FIX,
    )


def _fts(db_path: Path) -> Iterator[Finding]:
    """The message search index: its structure, and (when writable) its content."""
    from hermes_es.queries.health import fts_content_problem, fts_structure_problem

    problem = fts_structure_problem(db_path)
    checked_content = False
    if problem is None:
        problem, checked_content = fts_content_problem(db_path)
    if problem is None:
        message = "search index is consistent"
        if not checked_content:
            message += (
                " (structure only: the store is read-only here, and comparing the index "
                "with the messages needs write access; 'hermes sessions verify' compares it "
                "with the log)"
            )
        yield Finding(check="store.fts", level="ok", message=message)
        return
    yield Finding(
        check="store.fts",
        level="error",
        message=f"search index disagrees with the stored messages ({problem})",
        fix=REBUILD_FIX + " (this rebuilds the search index too)",
    )


def check_tokenizer() -> Finding:
    """Which build of the ``hermes`` search tokenizer this install registers (same tokens:
    the compiled one indexes several times faster)."""
    from hermes_es.projections.fts import (
        TOKENIZER_ENV,
        compiled_library,
        tokenizer_build,
        tokenizer_load_error,
    )

    check = "search.tokenizer"
    library = compiled_library()
    if tokenizer_build() == "c":
        return Finding(check=check, level="ok", message=f"compiled tokenizer ({library})")
    error = tokenizer_load_error()
    if error is not None:
        return Finding(
            check=check,
            level="warning",
            message=f"the compiled tokenizer failed to load ({error}); using the Python one",
            fix="reinstall hermes_es (pip install) so the tokenizer is built for this SQLite",
        )
    if library is not None:
        return Finding(
            check=check,
            level="info",
            message=f"Python tokenizer ({TOKENIZER_ENV}=python); the compiled one is built",
        )
    return Finding(
        check=check,
        level="info",
        message="Python tokenizer: the compiled one was not built (slower indexing, same tokens)",
        fix="reinstall hermes_es with a C compiler and SQLite's headers (Debian: libsqlite3-dev)",
    )


def _prompts(conn: apsw.Connection) -> Iterator[Finding]:
    """Stored prompts the repair scan would clear."""
    from hermes_es.commands.prompts_admin import scan_prompts

    counts = scan_prompts(conn).counts
    candidates = counts.get("candidate", 0)
    unverifiable = counts.get("unverifiable_no_pin", 0) + counts.get("unverifiable_memory_only", 0)
    if candidates:
        yield Finding(
            check="store.prompts",
            level="warning",
            message=f"{candidates} stored prompt(s) lack the Skill Safety guidance although "
            "their tools include skill_manage",
            fix="review with 'hermes sessions repair-prompts', then run it with --apply",
        )
    elif unverifiable:
        yield Finding(
            check="store.prompts",
            level="info",
            message=f"{unverifiable} stored prompt(s) cannot be verified (no or memory-only "
            "tools pin); see 'hermes sessions repair-prompts'",
        )
    else:
        yield Finding(check="store.prompts", level="ok", message="stored prompts look healthy")


def _wal(db_path: Path) -> Finding:
    """The size of the write-ahead log."""
    wal = db_path.with_name(db_path.name + "-wal")
    size = wal.stat().st_size if wal.exists() else 0
    mib = size / (1024 * 1024)
    if size <= WAL_WARN_BYTES:
        return Finding(check="store.wal", level="ok", message=f"write-ahead log is {mib:.1f} MiB")
    return Finding(
        check="store.wal",
        level="warning",
        message=f"write-ahead log is {mib:.1f} MiB (over {WAL_WARN_BYTES // (1024 * 1024)} MiB)",
        fix="a long-running reader keeps it from being checkpointed: close idle hermes "
        "processes (see store.holders), then run 'hermes sessions optimize'",
    )


def _holders(db_path: Path) -> Finding:
    """Processes registered as holding state.db (when holder leases are available)."""
    try:
        module = importlib.import_module("hermes_es.commands.holders")
    except ModuleNotFoundError as exc:
        if exc.name != "hermes_es.commands.holders":
            raise
        module = None
    live_holders = getattr(module, "live_holders", None)
    if live_holders is None:
        return Finding(
            check="store.holders",
            level="skipped",
            message="live-holder detection is not available in this build; check skipped",
        )
    holders = list(live_holders(db_path))
    if not holders:
        return Finding(check="store.holders", level="ok", message="no other process holds it")
    describe = getattr(module, "describe", str)
    names = "; ".join(_describe_holder(describe, h) for h in holders)
    return Finding(
        check="store.holders",
        level="info",
        message=f"{len(holders)} live process(es) hold state.db: {names}",
    )


def _describe_holder(describe: Callable[[Any], str], holder: Any) -> str:
    """A holder for messages, whatever shape the holders module gives it."""
    try:
        return str(describe(holder))
    except (TypeError, AttributeError):
        return str(holder)


# --- config ----------------------------------------------------------------------------------


def check_config(config_path: Path, environ: Mapping[str, str]) -> list[Finding]:
    """Load the config; report unknown keys and legacy session-reset settings."""
    findings: list[Finding] = []
    loaded: LoadedConfig | None = None
    try:
        loaded = load_config(config_path)
    except ConfigError as exc:
        findings.append(
            Finding(
                check="config.load",
                level="error",
                message=str(exc),
                fix=f"fix {config_path}; commands that read the config (such as hermes chat) "
                "refuse to run until it is fixed",
            )
        )
    if loaded is not None:
        findings.append(_loaded(loaded))
        findings.extend(
            Finding(
                check="config.unknown_key",
                level="warning",
                message=f"{config_path}: unknown key {key!r} is ignored",
                fix="remove it or correct its spelling",
            )
            for key in loaded.unknown_keys
        )
    raw = loaded.raw if loaded is not None else {}
    findings.extend(
        Finding(
            check="config.legacy_reset",
            level="warning",
            message=message,
            fix="remove the setting, or install the plugin to keep time-based resets: "
            "hermes plugins install hermes-session-reset-policy",
        )
        for message in legacy_reset_findings(raw, environ)
    )
    return findings


def _loaded(loaded: LoadedConfig) -> Finding:
    """The config file's presence."""
    if loaded.exists:
        return Finding(check="config.load", level="ok", message=f"{loaded.path} loads")
    return Finding(
        check="config.load", level="info", message=f"no {loaded.path}; defaults are in use"
    )
