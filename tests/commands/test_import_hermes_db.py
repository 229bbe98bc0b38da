"""Migration of a Hermes Agent state.db (built with Hermes' published schema) into events."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hermes_es.commands.migrate_hermes import import_hermes_db
from hermes_es.queries.transcript import messages_of

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.commands.export_helpers import open_engine
    from tests.migrate.hermes_schema import HermesStateDb
except ModuleNotFoundError:  # pragma: no cover
    from export_helpers import open_engine  # type: ignore[no-redef,import-not-found]
    from hermes_schema import HermesStateDb  # type: ignore[no-redef,import-not-found]

CALLS = [{"id": "call_1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}]


def build(path: Path, version: int = 30) -> None:
    """A Hermes file with a compression child, a delegate, flags, tool calls and row states."""
    with HermesStateDb(path, version) as db:
        extra = (
            {"pinned": 1, "archived": 1, "cwd": "/w", "git_repo_root": "/w"} if version > 20 else {}
        )
        db.session(
            "root", title="Fix build", ended_at=40.0, end_reason="compression", source="telegram",
            model="gpt-x", model_config=json.dumps({"temperature": 0.2}), input_tokens=120,
            output_tokens=30, system_prompt="You are Hermes.", **extra,
        )  # fmt: skip
        db.session("cont", parent_session_id="root", title="Fix build #2")
        db.session(
            "sub", parent_session_id="root", source="subagent",
            model_config=json.dumps({"_delegate_from": "root"}),
        )  # fmt: skip
        db.message("root", "user", "build is red")
        db.message("root", "assistant", None, tool_calls=json.dumps(CALLS))
        db.message("root", "tool", "exit 1", tool_call_id="call_1", tool_name="terminal")
        if version > 20:
            db.message("root", "assistant", "old answer", active=0, compacted=1)
            db.message("root", "assistant", "rewound answer", active=0, compacted=0)
        db.message("root", "assistant", "fixed")
        db.message("cont", "user", "and now?")
        db.message("sub", "user", "subtask")
        db.message("root", "session_meta", "bookkeeping")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_migration_turns_every_session_into_events(tmp_path: Path) -> None:
    """Sessions, titles, lineage, tool calls and row states arrive; counts are reported."""
    src = tmp_path / "hermes" / "state.db"
    src.parent.mkdir()
    build(src)
    engine = open_engine(tmp_path / "home")
    report = import_hermes_db(engine.store, src)
    assert report.imported_sessions == 3 and report.imported_messages == 8
    assert report.source_counts is not None and report.source_counts.sessions == 3
    assert any("bookkeeping" in s for s in report.skipped)
    root = engine.get("root")
    assert (root.title, root.source, root.model, root.pinned, root.archived) == (
        "Fix build", "telegram", "gpt-x", True, "user",
    )  # fmt: skip
    assert (root.tokens_in, root.tokens_out, root.ended, root.continued_into) == (
        120,
        30,
        True,
        "cont",
    )
    assert engine.stored_prompt("root") == "You are Hermes."
    assert (engine.get("cont").parent_kind, engine.get("sub").parent_kind) == (
        "compression",
        "delegate",
    )
    rows = messages_of(engine.store.connection(), "root", scope="all")
    assert [r.state for r in rows] == [
        "active",
        "active",
        "active",
        "compacted",
        "rewound",
        "active",
    ]
    assert rows[1].tool_calls == [{"id": "call_1", "name": "terminal", "arguments": "{}"}]
    # a live conversation: its active rows are the model context, in their order
    context = messages_of(engine.store.connection(), "root", scope="context")
    assert [r.seq for r in context] == [r.seq for r in rows if r.state == "active"]


def test_migration_never_writes_the_source(tmp_path: Path) -> None:
    """The source file's bytes are unchanged and no side files appear next to it."""
    src = tmp_path / "hermes" / "state.db"
    src.parent.mkdir()
    build(src)
    before = _digest(src)
    engine = open_engine(tmp_path / "home")
    import_hermes_db(engine.store, src)
    assert _digest(src) == before
    assert sorted(p.name for p in src.parent.iterdir()) == ["state.db"]


def test_migration_rerun_skips_present_sessions(tmp_path: Path) -> None:
    """Running the migration twice adds nothing the second time."""
    src = tmp_path / "state.db"
    build(src)
    engine = open_engine(tmp_path / "home")
    import_hermes_db(engine.store, src)
    again = import_hermes_db(engine.store, src)
    assert again.imported_sessions == 0 and sorted(again.already_present) == ["cont", "root", "sub"]


def test_migration_of_schema_20_without_flags(tmp_path: Path) -> None:
    """A v20 file (no active/compacted or flag columns) imports every row as active, unflagged."""
    src = tmp_path / "state.db"
    build(src, version=20)
    engine = open_engine(tmp_path / "home")
    report = import_hermes_db(engine.store, src)
    assert report.imported_sessions == 3
    root = engine.get("root")
    assert (root.pinned, root.archived, root.hidden) == (False, "", False)
    states = {r.state for r in messages_of(engine.store.connection(), "root", scope="all")}
    assert states == {"active"}


def test_migration_guard_skips_oversized_sessions(tmp_path: Path) -> None:
    """Sessions above max_import_messages are skipped and reported, the rest imported."""
    src = tmp_path / "state.db"
    build(src)
    engine = open_engine(tmp_path / "home")
    report = import_hermes_db(engine.store, src, max_messages=2)
    assert report.imported_sessions == 2 and report.over_cap == ["root"]
    assert any("session root: 6 messages exceed" in s for s in report.skipped)
