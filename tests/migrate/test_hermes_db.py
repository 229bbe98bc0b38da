"""The Hermes Agent state.db reader: fidelity, ordering, reporting, refusal, and read-only-ness."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_es.errors import ValidationError
from hermes_es.migrate.hermes_db import (
    LegacyMessage,
    LegacySession,
    parents_first,
    read_hermes_db,
)

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.migrate.hermes_schema import HermesStateDb
except ModuleNotFoundError:  # prepend mode puts this folder itself on sys.path
    from hermes_schema import HermesStateDb  # type: ignore[no-redef,import-not-found]

CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}},
    {"id": "call_2", "type": "function", "function": {"name": "read_file", "arguments": "{}"}},
]


def digest(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(directory: Path) -> list[str]:
    """File names in a directory, sorted."""
    return sorted(p.name for p in directory.iterdir())


def read_all(path: Path) -> tuple[list[LegacySession], dict[str, list[LegacyMessage]], list[str]]:
    """Every session, its messages and the skipped list, read in one go."""
    with read_hermes_db(path) as db:
        sessions = list(db.sessions())
        messages = {s.id: list(db.messages(s.id)) for s in sessions}
        return sessions, messages, list(db.skipped)


def build_latest(path: Path) -> None:
    """A v30 file with a three-deep compression chain, a branch, titles, tool calls and flags."""
    with HermesStateDb(path, 30) as db:
        # Children are inserted before their parents, and start earlier, to prove the ordering.
        db.session(
            "child",
            parent_session_id="parent",
            title="Fix build #3",
            started_at=10.0,
            model="anthropic/claude-sonnet-4.6",
        )
        db.session("parent", parent_session_id="root", title="Fix build #2", started_at=20.0)
        db.execute("INSERT INTO system_prompts VALUES ('h1', 'You are Hermes.')")
        db.session(
            "root",
            title="Fix build",
            started_at=30.0,
            ended_at=40.0,
            end_reason="compression",
            source="telegram",
            user_id="u-42",
            model="gpt-x",
            model_config=json.dumps({"temperature": 0.2, "_reset_from": None}),
            system_prompt_hash="h1",
            input_tokens=1200,
            output_tokens=300,
            cache_read_tokens=50,
            cache_write_tokens=7,
            reasoning_tokens=11,
            message_count=4,
            tool_call_count=2,
            api_call_count=3,
            estimated_cost_usd=0.25,
            cwd="/home/me/proj",
            git_branch="main",
            pinned=1,
            archived=1,
            title_source="user",
            profile_name="coder",
            session_key="telegram:dm:42",
        )
        db.session("branch", parent_session_id="root", started_at=35.0, hidden=1)
        db.message("root", "system", "You are Hermes.")
        db.message("root", "user", "build is red")
        db.message(
            "root",
            "assistant",
            None,
            tool_calls=json.dumps(CALLS),
            finish_reason="tool_calls",
            reasoning="look at CI",
            token_count=33,
        )
        db.message("root", "tool", "exit 1", tool_call_id="call_1", tool_name="terminal")
        db.message("root", "tool", "file text", tool_call_id="call_2", tool_name="read_file")
        db.message("root", "assistant", "old answer", active=0, compacted=1)
        db.message("root", "assistant", "rewound answer", active=0, compacted=0)
        db.message("root", "assistant", "fixed", finish_reason="stop", display_identity=b"\x01\xff")
        db.message("child", "user", "and now?")


def test_latest_schema_sessions_carry_every_documented_field(tmp_path: Path) -> None:
    """A v30 session row comes back with metadata, tokens, flags, workspace and resolved prompt."""
    build_latest(tmp_path / "state.db")
    sessions, _, skipped = read_all(tmp_path / "state.db")
    root = next(s for s in sessions if s.id == "root")
    assert skipped == []
    assert (root.source, root.user_id, root.model) == ("telegram", "u-42", "gpt-x")
    assert root.model_config == {"temperature": 0.2, "_reset_from": None}
    assert root.system_prompt == "You are Hermes."
    assert (root.title, root.title_source, root.end_reason) == ("Fix build", "user", "compression")
    assert (root.started_at, root.ended_at) == (30.0, 40.0)
    tokens = (root.input_tokens, root.output_tokens, root.cache_read_tokens)
    assert tokens == (1200, 300, 50)
    assert (root.cache_write_tokens, root.reasoning_tokens) == (7, 11)
    assert (root.message_count, root.tool_call_count, root.api_call_count) == (4, 2, 3)
    assert root.estimated_cost_usd == 0.25
    assert (root.cwd, root.git_branch, root.profile_name) == ("/home/me/proj", "main", "coder")
    assert (root.pinned, root.archived, root.hidden) == (True, True, False)
    assert next(s for s in sessions if s.id == "branch").hidden is True
    assert root.extra["session_key"] == "telegram:dm:42"


def test_latest_schema_messages_keep_order_tool_calls_and_flags(tmp_path: Path) -> None:
    """Messages come back in stored order with decoded tool calls and active/compacted flags."""
    build_latest(tmp_path / "state.db")
    _, messages, _ = read_all(tmp_path / "state.db")
    root = messages["root"]
    assert [m.role for m in root] == ["system", "user", "assistant", "tool", "tool"] + [
        "assistant"
    ] * 3
    assert [m.row_id for m in root] == sorted(m.row_id for m in root)
    call = root[2]
    assert (call.content, call.tool_calls, call.finish_reason) == ("", CALLS, "tool_calls")
    assert (call.reasoning, call.token_count) == ("look at CI", 33)
    assert (root[3].tool_call_id, root[3].tool_name, root[3].content) == (
        "call_1",
        "terminal",
        "exit 1",
    )
    assert [m.status for m in root[5:]] == ["compacted", "rewound", "live"]
    assert root[7].extra["display_identity"] == "01ff"
    assert [m.content for m in messages["child"]] == ["and now?"]


def test_sessions_come_parents_first_even_when_children_start_earlier(tmp_path: Path) -> None:
    """Every parent is yielded before its children; siblings keep start order."""
    build_latest(tmp_path / "state.db")
    sessions, _, _ = read_all(tmp_path / "state.db")
    order = [s.id for s in sessions]
    assert order == ["root", "parent", "child", "branch"]
    assert {s.id: s.parent_session_id for s in sessions}["child"] == "parent"


def test_v20_file_reads_with_defaults_for_later_columns(tmp_path: Path) -> None:
    """A file at the documented v20 shape reads; absent flags and columns take Hermes defaults."""
    path = tmp_path / "state.db"
    with HermesStateDb(path, 20) as db:
        db.session("old", title="Legacy", system_prompt="inline prompt", input_tokens=9)
        db.message("old", "user", "hello")
        db.message("old", "assistant", "hi", tool_calls=json.dumps(CALLS[:1]))
    with read_hermes_db(path) as reader:
        assert reader.schema_version == 20
        assert "active" not in reader.message_columns
        (session,) = list(reader.sessions())
        messages = list(reader.messages("old"))
        counts = reader.counts()
    assert (session.title, session.system_prompt, session.input_tokens) == (
        "Legacy",
        "inline prompt",
        9,
    )
    assert (session.pinned, session.archived, session.cwd) == (False, False, None)
    assert [(m.role, m.active, m.compacted) for m in messages] == [
        ("user", True, False),
        ("assistant", True, False),
    ]
    assert messages[1].tool_calls == CALLS[:1]
    assert (counts.sessions, counts.messages, counts.live_messages) == (1, 2, 2)


def test_counts_split_messages_by_role_and_state(tmp_path: Path) -> None:
    """counts() reports totals by role and live/compacted/rewound state."""
    build_latest(tmp_path / "state.db")
    with read_hermes_db(tmp_path / "state.db") as db:
        counts = db.counts()
    assert counts.sessions == 4
    assert counts.messages == 9
    assert counts.messages_by_role == {"system": 1, "user": 2, "assistant": 4, "tool": 2}
    assert (counts.live_messages, counts.compacted_messages, counts.rewound_messages) == (7, 1, 1)
    assert counts.orphan_messages == 0


def test_bad_tool_call_json_is_reported_and_kept_raw(tmp_path: Path) -> None:
    """Invalid tool_calls JSON drops only that field, names the row, and keeps the raw text."""
    path = tmp_path / "state.db"
    with HermesStateDb(path) as db:
        db.session("s")
        row = db.message("s", "assistant", "calling", tool_calls="[{not json")
        db.message("s", "assistant", "odd", tool_calls='"a string"')
    _, messages, skipped = read_all(path)
    first, second = messages["s"]
    assert (first.content, first.tool_calls) == ("calling", [])
    assert first.extra["tool_calls"] == "[{not json"
    assert any(
        f"message row {row} in session s: tool_calls is not valid JSON" in p for p in skipped
    )
    assert second.tool_calls == []
    assert any("tool_calls is JSON but not a list of objects" in p for p in skipped)


def test_bad_model_config_json_is_reported(tmp_path: Path) -> None:
    """A session whose model_config is not JSON still imports, with the problem reported."""
    path = tmp_path / "state.db"
    with HermesStateDb(path) as db:
        db.session("s", model_config="{oops")
    sessions, _, skipped = read_all(path)
    assert sessions[0].model_config == {}
    assert sessions[0].extra["model_config"] == "{oops"
    assert any(p.startswith("session s: model_config is not valid JSON") for p in skipped)


def test_unknown_role_is_skipped_and_reported(tmp_path: Path) -> None:
    """A message with a role Hermes never writes is not yielded and is named in skipped."""
    path = tmp_path / "state.db"
    with HermesStateDb(path) as db:
        db.session("s")
        db.message("s", "user", "hi")
        row = db.message("s", "narrator", "once upon a time")
        db.message("s", "assistant", "hello")
    _, messages, skipped = read_all(path)
    assert [m.role for m in messages["s"]] == ["user", "assistant"]
    assert f"message row {row} in session s: unknown role 'narrator'; not imported" in skipped


def test_bookkeeping_rows_are_counted_unless_asked_for(tmp_path: Path) -> None:
    """session_meta rows are summarised as skipped by default and yielded on request."""
    path = tmp_path / "state.db"
    with HermesStateDb(path) as db:
        db.session("s")
        db.message("s", "user", "hi")
        db.message("s", "session_meta", "turn done")
        db.message("s", "session_meta", "turn done")
    with read_hermes_db(path) as reader:
        plain = list(reader.messages("s"))
        assert reader.skipped == [
            "session s: 2 Hermes bookkeeping row(s) (role 'session_meta') not imported"
        ]
        everything = list(reader.messages("s", include_bookkeeping=True))
    assert [m.role for m in plain] == ["user"]
    assert [m.role for m in everything] == ["user", "session_meta", "session_meta"]


def test_dangling_parent_and_cycle_are_cut_and_reported(tmp_path: Path) -> None:
    """Missing parents and parent cycles are reported; every session is still yielded once."""
    path = tmp_path / "state.db"
    with HermesStateDb(path) as db:
        db.session("lost", parent_session_id="deleted-long-ago")
        db.session("a", parent_session_id="b", started_at=1.0)
        db.session("b", parent_session_id="a", started_at=2.0)
        db.session("c", parent_session_id="b", started_at=0.5)
    sessions, _, skipped = read_all(path)
    by_id = {s.id: s for s in sessions}
    order = [s.id for s in sessions]
    assert sorted(order) == ["a", "b", "c", "lost"]
    assert by_id["lost"].parent_session_id is None
    assert by_id["a"].parent_session_id is None
    assert by_id["b"].parent_session_id == "a"
    assert order.index("a") < order.index("b") < order.index("c")
    assert any(p.startswith("session lost: names parent 'deleted-long-ago'") for p in skipped)
    assert any(p.startswith("session a: closes a parent cycle") for p in skipped)


def test_orphan_messages_and_missing_prompt_are_reported(tmp_path: Path) -> None:
    """Messages of an unknown session and a dangling prompt hash are reported at open/read."""
    path = tmp_path / "state.db"
    with HermesStateDb(path) as db:
        db.session("s", system_prompt_hash="gone")
        db.message("ghost", "user", "nobody home")
    sessions, _, skipped = read_all(path)
    assert sessions[0].system_prompt is None
    assert skipped[0] == (
        "1 message row(s) belong to session ids not in the sessions table (first: 'ghost'); "
        "not imported"
    )
    assert any("system prompt hash gone has no stored prompt" in p for p in skipped)


def test_older_schema_version_is_refused_naming_file_and_version(tmp_path: Path) -> None:
    """A state.db below schema version 20 is refused with the path and version in the message."""
    path = tmp_path / "state.db"
    with HermesStateDb(path, 19, schema=20) as db:
        db.session("s")
    with pytest.raises(
        ValidationError, match=r"state\.db is a Hermes state\.db at schema version 19"
    ):
        read_hermes_db(path)


def test_file_without_hermes_tables_is_refused(tmp_path: Path) -> None:
    """A SQLite file lacking sessions/messages/schema_version is refused, naming what is missing."""
    path = tmp_path / "other.db"
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE sessions (id TEXT)").fetchall()
    conn.close()
    with pytest.raises(ValidationError, match="missing table\\(s\\) messages, schema_version"):
        read_hermes_db(path)


def test_missing_file_and_non_database_are_refused(tmp_path: Path) -> None:
    """A missing path and a file that is not SQLite both raise ValidationError naming the path."""
    with pytest.raises(ValidationError, match="no such file"):
        read_hermes_db(tmp_path / "absent.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(ValidationError, match=r"junk\.db is not a readable SQLite database"):
        read_hermes_db(junk)
    assert listing(tmp_path) == ["junk.db"]


def test_newer_schema_version_reads_with_a_note(tmp_path: Path) -> None:
    """A version above the newest known still reads, with a note about unknown columns."""
    path = tmp_path / "state.db"
    with HermesStateDb(path, 31) as db:
        db.session("s")
    with read_hermes_db(path) as reader:
        assert [s.id for s in reader.sessions()] == ["s"]
        assert "newer than 30" in reader.notes[0]


def test_reading_leaves_the_file_bytes_and_directory_unchanged(tmp_path: Path) -> None:
    """After a full read the source bytes hash the same and no -wal/-shm file has appeared."""
    path = tmp_path / "state.db"
    build_latest(path)
    before, files_before = digest(path), listing(tmp_path)
    with read_hermes_db(path) as reader:
        assert reader.open_mode == "immutable"
        for session in reader.sessions():
            list(reader.messages(session.id))
        reader.counts()
    assert digest(path) == before
    assert listing(tmp_path) == files_before == ["state.db"]


def test_live_wal_is_read_without_touching_the_main_file(tmp_path: Path) -> None:
    """With a Hermes writer still open, WAL-only rows are read and the main file is unchanged."""
    path = tmp_path / "state.db"
    writer = HermesStateDb(path)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.session("s")
        writer.message("s", "user", "only in the WAL")
        before, files_before = digest(path), listing(tmp_path)
        assert files_before == ["state.db", "state.db-shm", "state.db-wal"]
        _, messages, _ = read_all(path)
        assert digest(path) == before
        assert listing(tmp_path) == files_before
    finally:
        writer.close()
    assert [m.content for m in messages["s"]] == ["only in the WAL"]


def test_wal_without_shm_is_read_from_a_private_copy(tmp_path: Path) -> None:
    """A copied -wal without its -shm is read from a private snapshot; nothing appears beside it."""
    live, copied = tmp_path / "live", tmp_path / "copied"
    live.mkdir()
    copied.mkdir()
    writer = HermesStateDb(live / "state.db")
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.session("s")
        writer.message("s", "user", "only in the WAL")
        shutil.copyfile(live / "state.db", copied / "state.db")
        shutil.copyfile(live / "state.db-wal", copied / "state.db-wal")
    finally:
        writer.close()
    before = (digest(copied / "state.db"), digest(copied / "state.db-wal"))
    with read_hermes_db(copied / "state.db") as reader:
        assert reader.open_mode == "snapshot"
        assert [m.content for m in reader.messages("s")] == ["only in the WAL"]
    assert (digest(copied / "state.db"), digest(copied / "state.db-wal")) == before
    assert listing(copied) == ["state.db", "state.db-wal"]


def test_path_with_uri_special_characters_opens(tmp_path: Path) -> None:
    """A path containing '?', '#', '%' and spaces is opened as that file, not parsed as a URI."""
    folder = tmp_path / "odd ?#% dir"
    folder.mkdir()
    with HermesStateDb(folder / "state.db") as db:
        db.session("s")
    sessions, _, _ = read_all(folder / "state.db")
    assert [s.id for s in sessions] == ["s"]


parent_maps = st.integers(min_value=0, max_value=12).flatmap(
    lambda n: st.lists(
        st.one_of(st.none(), st.integers(min_value=0, max_value=n + 2)), min_size=n, max_size=n
    )
)


@settings(max_examples=300, deadline=None)
@given(parent_maps)
def test_parents_first_orders_any_forest_and_cuts_only_bad_links(raw: list[int | None]) -> None:
    """Any parent map yields each id once, parents first, cutting only dangling or cyclic links."""
    ids = [f"s{i}" for i in range(len(raw))]
    parents = {ids[i]: (None if p is None else f"s{p}") for i, p in enumerate(raw)}
    order, cut = parents_first(parents)
    assert sorted(order) == sorted(ids)
    place = {node: index for index, node in enumerate(order)}
    for node, parent in parents.items():
        if parent is not None and node not in cut:
            assert place[parent] < place[node]
        if parent is not None and parent not in parents:
            assert "not in the file" in cut[node]
    for node in cut:
        assert parents[node] is not None
        if parents[node] in parents:
            assert _on_cycle(parents, node)


def _on_cycle(parents: dict[str, str | None], start: str) -> bool:
    """Whether following parent links from ``start`` comes back to ``start``."""
    node = parents[start]
    for _ in range(len(parents)):
        if node is None or node not in parents:
            return False
        if node == start:
            return True
        node = parents[node]
    return False


def test_temporary_snapshot_is_removed_on_close(tmp_path: Path) -> None:
    """The private copy made for a -wal without -shm is deleted when the reader closes."""
    path = tmp_path / "state.db"
    writer = HermesStateDb(path)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.session("s")
    copy_dir = tmp_path / "copy"
    copy_dir.mkdir()
    shutil.copyfile(path, copy_dir / "state.db")
    shutil.copyfile(tmp_path / "state.db-wal", copy_dir / "state.db-wal")
    writer.close()
    before = set(Path(tempfile.gettempdir()).glob("hermes-import-*"))
    reader = read_hermes_db(copy_dir / "state.db")
    during = set(Path(tempfile.gettempdir()).glob("hermes-import-*")) - before
    reader.close()
    assert len(during) == 1
    assert not any(p.exists() for p in during)


def test_hot_rollback_journal_is_rolled_back_in_a_private_copy(tmp_path: Path) -> None:
    """A crash copy with a hot -journal reads as the last committed state; the source is intact."""
    live, copied = tmp_path / "live", tmp_path / "copied"
    live.mkdir()
    copied.mkdir()
    with HermesStateDb(live / "state.db") as db:
        db.session("s")
        db.message("s", "user", "committed")
    writer = apsw.Connection(str(live / "state.db"))
    writer.execute("PRAGMA journal_mode = DELETE").fetchall()
    writer.execute("PRAGMA cache_size = 1").fetchall()
    writer.execute("BEGIN").fetchall()
    for index in range(200):
        writer.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            ("s", "user", f"uncommitted {index} " + "x" * 2000, 1.0),
        ).fetchall()
    for name in ("state.db", "state.db-journal"):
        shutil.copyfile(live / name, copied / name)
    writer.execute("ROLLBACK").fetchall()
    writer.close()
    before = (digest(copied / "state.db"), digest(copied / "state.db-journal"))
    with read_hermes_db(copied / "state.db") as reader:
        assert reader.open_mode == "snapshot"
        assert [m.content for m in reader.messages("s")] == ["committed"]
    assert (digest(copied / "state.db"), digest(copied / "state.db-journal")) == before
    assert listing(copied) == ["state.db", "state.db-journal"]
