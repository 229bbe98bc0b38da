"""docs/schema.md stays true: it names every table, column, index, event topic and event field
a real state.db has; the filterable start fields are readable sessions columns; doctor links it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from hermes_es import events as ev
from hermes_es.cli.app import cli
from hermes_es.commands.delete import delete_session
from hermes_es.commands.engine import SessionEngine
from hermes_es.events.base import all_topics, event_type
from hermes_es.projections.rebuild import rebuild, verify
from hermes_es.store.message_text import register_message_text

DOC = Path(__file__).resolve().parents[1] / "docs" / "schema.md"


def _doc() -> str:
    return DOC.read_text()


def _section(doc: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    found = re.search(rf"^{re.escape(heading)}(?![\w`])", doc, re.M)
    assert found is not None, f"docs/schema.md has no heading {heading!r}"
    rest = doc[found.end() :]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, re.M)]
    return rest[: ends[0]] if ends else rest


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A real state.db with a gateway session, a delegate, a prompt and a delete receipt."""
    engine = SessionEngine.open(tmp_path, actor="test")
    try:
        sid = engine.start_session(
            "telegram",
            platform="telegram",
            chat_id="123456",
            model="m",
            model_config={"reasoning_effort": "high", "provider": "x"},
            launch_flags={"yolo": True},
            system_prompt="Be brief.",
            cwd="/",
        )
        engine.append_message(sid, "user", "hello there")
        kid = engine.start_session("cli", parent_id=sid, parent_kind="delegate", cwd="/")
        gone = engine.start_session("cli", cwd="/")
        delete_session(engine.store, gone)
        assert kid
    finally:
        engine.close()
    return tmp_path / "state.db"


def _tables(db: Path) -> dict[str, list[str]]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    register_message_text(conn)  # the messages view reads text through it
    try:
        names = [
            str(r[0])
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        ]
        out: dict[str, list[str]] = {}
        for name in names:
            if name == "messages_fts":  # a virtual table: its module needs the tokenizer
                out[name] = ["content"]
                continue
            out[name] = [str(r[1]) for r in conn.execute(f"PRAGMA table_info('{name}')")]
        return out
    finally:
        conn.close()


def test_doc_names_every_table_and_column(store: Path) -> None:
    """Each table of a real state.db has its section (or row) naming each of its columns."""
    doc = _doc()
    tables = _tables(store)
    assert {"events", "sessions", "messages", "message_rows", "messages_fts", "lineage"} <= set(
        tables
    )
    for table, columns in tables.items():
        heading = f"### `{table}`"
        if re.search(rf"^{re.escape(heading)}(?![\w`])", doc, re.M):
            part = _section(doc, heading)
            missing = [c for c in columns if f"| `{c}` |" not in part]
        else:
            row = re.search(rf"^\| `{re.escape(table)}` \|.*$", doc, re.M)
            assert row is not None, f"docs/schema.md does not describe table {table}"
            missing = [c for c in columns if f"`{c}`" not in row.group(0)]
        assert not missing, f"docs/schema.md: table {table} lacks columns {missing}"
    documented = re.findall(r"^### `(\w+)`", _section(doc, "## Tables"), re.M)
    assert set(documented) <= set(tables), "docs/schema.md describes a table that is gone"


def test_doc_names_every_index(store: Path) -> None:
    """Every explicit index of state.db is named in docs/schema.md."""
    conn = apsw.Connection(str(store), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        ).fetchall()
    finally:
        conn.close()
    doc = _doc()
    missing = [str(r[0]) for r in rows if f"`{r[0]}`" not in doc]
    assert rows and not missing, f"docs/schema.md does not name indexes {missing}"


def test_doc_catalogues_every_event_and_field() -> None:
    """Every registered topic has a section listing each of its fields (and Message's)."""
    doc = _doc()
    catalogue = _section(doc, "## Event catalogue")
    for topic in all_topics():
        heading = f"#### `{topic}`"
        assert heading in catalogue, f"docs/schema.md lacks event {topic}"
        part = _section(catalogue, heading)
        fields = [f for f in event_type(topic).__struct_fields__ if f not in ("at", "actor")]
        missing = [f for f in fields if f"| `{f}` |" not in part]
        assert not missing, f"docs/schema.md: event {topic} lacks fields {missing}"
    shapes = _section(catalogue, "### Shared shapes")
    for field in ev.Message.__struct_fields__:
        assert f"| `{field}` |" in shapes, field


def test_start_fields_are_readable_columns_after_rebuild(store: Path) -> None:
    """platform, chat_id, model_config and launch_flags are plain columns (JSON text) that
    rebuild-projections fills and verify agrees with."""
    query = (
        "SELECT platform, chat_id, json_extract(model_config, '$.reasoning_effort'),"
        " json_extract(launch_flags, '$.yolo'), model_config FROM sessions WHERE source = ?"
    )

    def row() -> tuple[object, ...]:
        conn = apsw.Connection(str(store), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            return tuple(conn.execute(query, ("telegram",)).fetchall()[0])
        finally:
            conn.close()

    before = row()
    assert before[:4] == ("telegram", "123456", "high", 1)
    assert json.loads(str(before[4])) == {"provider": "x", "reasoning_effort": "high"}
    rebuild(store)
    assert row() == before
    assert all(d.equal for d in verify(store))


def test_an_older_layout_gets_the_columns_filled_on_open(store: Path) -> None:
    """A state.db from before these columns (layout 3) is upgraded on open, from the log."""
    conn = apsw.Connection(str(store))
    try:
        conn.execute("DROP INDEX sessions_chat")
        for column in ("platform", "chat_id", "model_config", "launch_flags"):
            conn.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
        conn.execute("PRAGMA user_version = 3")
    finally:
        conn.close()
    engine = SessionEngine.open(store.parent, actor="test")
    try:
        rows = engine.store.connection().execute(
            "SELECT chat_id, launch_flags FROM sessions WHERE platform = 'telegram'"
        )
        assert [tuple(r) for r in rows] == [("123456", '{"yolo": true}')]
    finally:
        engine.close()
    assert all(d.equal for d in verify(store))


def test_doctor_links_the_schema_doc(store: Path) -> None:
    """`hermes doctor` (and --json) point at docs/schema.md."""
    env = {"HERMES_HOME": str(store.parent)}
    result = CliRunner().invoke(cli, ["doctor"], env=env)
    assert "docs/schema.md" in result.output
    as_json = CliRunner().invoke(cli, ["doctor", "--json"], env=env)
    assert Path(json.loads(as_json.output)["schema_doc"]) == DOC
