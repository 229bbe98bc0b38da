"""SessionEngine use cases on a real state.db: happy paths, uid idempotency, conflicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hermes_es.aggregates import session as agg
from hermes_es.commands.engine import SessionEngine, db_path_for, to_draft
from hermes_es.errors import ConflictError, InvariantError, ValidationError
from hermes_es.ids import looks_like_session_id
from hermes_es.projections.rebuild import verify
from hermes_es.queries.transcript import messages_of


def event_count(engine: SessionEngine) -> int:
    """How many events the log holds."""
    return int(engine.store.connection().execute("SELECT COUNT(*) FROM events").fetchall()[0][0])


def rows(engine: SessionEngine, sql: str, *params: object) -> list[tuple[object, ...]]:
    """Run a read query on the engine's connection."""
    return [tuple(r) for r in engine.store.connection().execute(sql, params).fetchall()]


def assert_verified(store: SessionEngine | Path) -> None:
    """Live projections equal a fresh replay of the log, table by table (either backend)."""
    diffs = store.backend.verify() if isinstance(store, SessionEngine) else verify(store)
    assert diffs
    assert [d for d in diffs if not d.equal] == []


TOOL_TURN: list[dict[str, Any]] = [
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call-1", "name": "read_file", "arguments": '{"p": "a"}'}],
    },
    {"role": "tool", "content": "file body", "tool_call_id": "call-1", "tool_name": "read_file"},
    {"role": "assistant", "content": "The file says hello."},
]


def test_open_creates_state_db_in_home(home: Path) -> None:
    """Opening a HERMES_HOME creates state.db there, private to the user."""
    with SessionEngine.open(home):
        pass
    db = home / "state.db"
    assert db.exists()
    assert db.stat().st_mode & 0o777 == 0o600


def test_db_path_for_profiles_and_files(tmp_path: Path) -> None:
    """A profile name maps to profiles/<name>/state.db; a .db path is used as is."""
    assert db_path_for(tmp_path) == tmp_path / "state.db"
    assert db_path_for(tmp_path, "work") == tmp_path / "profiles" / "work" / "state.db"
    assert db_path_for(tmp_path, "default") == tmp_path / "state.db"
    assert db_path_for(tmp_path / "x.db") == tmp_path / "x.db"


def test_start_session_records_fields(engine: SessionEngine, home: Path) -> None:
    """start_session stores its fields; the id has the local CLI shape."""
    sid = engine.start_session(
        "cli",
        title="first",
        user_id="ana",
        model="m1",
        model_config={"reasoning_effort": "high"},
        tools=["read_file"],
        cwd=str(home),
    )
    assert looks_like_session_id(sid) and len(sid.rsplit("_", 1)[1]) == 6
    state = engine.get(sid)
    assert (state.version, state.source, state.title, state.title_kind) == (
        1,
        "cli",
        "first",
        "user",
    )
    assert (state.user_id, state.model, state.reasoning, state.tools) == (
        "ana",
        "m1",
        "high",
        ["read_file"],
    )
    assert state.cwd == str(home) and state.workspace_key == str(home)


def test_gateway_session_id_has_eight_hex(engine: SessionEngine) -> None:
    """Gateway sources get an 8-hex suffix."""
    sid = engine.start_session("telegram", cwd="")
    assert len(sid.rsplit("_", 1)[1]) == 8


@pytest.mark.parametrize("bad", ["receipt:zzz", "prompt:" + "ab" * 32, "a\nb", "../../evil"])
def test_start_session_refuses_invalid_id_and_stores_nothing(
    engine: SessionEngine, home: Path, bad: str
) -> None:
    """A bad explicit session id is refused by name; not even its system prompt is stored."""
    with pytest.raises(ValidationError, match="invalid session id") as info:
        engine.start_session("cli", session_id=bad, cwd="", system_prompt="You are terse.")
    assert repr(bad) in info.value.message
    assert event_count(engine) == 0
    assert rows(engine, "SELECT COUNT(*) FROM sessions") == [(0,)]
    assert_verified(engine)


def test_append_message_and_turn_assign_contiguous_seqs(engine: SessionEngine) -> None:
    """Messages get 0, 1, 2, … and a whole turn is appended as one event."""
    sid = engine.start_session("cli", cwd="")
    assert engine.append_message(sid, "user", "read a please") == 0
    before = event_count(engine)
    assert engine.append_turn(sid, TOOL_TURN) == [1, 2, 3]
    assert event_count(engine) == before + 1
    shown = messages_of(engine.store.connection(), sid)
    assert [(m.seq, m.role) for m in shown] == [
        (0, "user"),
        (1, "assistant"),
        (2, "tool"),
        (3, "assistant"),
    ]
    assert shown[1].tool_calls[0]["name"] == "read_file"
    assert shown[2].tool_call_id == "call-1"
    state = engine.get(sid)
    assert state.open_tool_calls == [] and state.active == [[0, 4]]


def test_tool_result_may_answer_an_earlier_turn(engine: SessionEngine) -> None:
    """A tool result answers a call made in an earlier append, once."""
    sid = engine.start_session("cli", cwd="")
    engine.append_message(
        sid, "assistant", "", tool_calls=[{"id": "c9", "name": "search", "arguments": "{}"}]
    )
    assert engine.get(sid).open_tool_calls == ["c9"]
    assert engine.append_message(sid, "tool", "hits", tool_call_id="c9", tool_name="search") == 1
    with pytest.raises(InvariantError, match="c9"):
        engine.append_message(sid, "tool", "again", tool_call_id="c9")


def test_uid_retry_is_idempotent(engine: SessionEngine) -> None:
    """Appending the same uid twice stores it once and returns the same seq."""
    sid = engine.start_session("cli", cwd="")
    engine.append_message(sid, "user", "first")
    seq = engine.append_message(sid, "user", "retry me", uid="client-uid-1")
    count = event_count(engine)
    assert engine.append_message(sid, "user", "retry me", uid="client-uid-1") == seq
    assert event_count(engine) == count
    assert rows(engine, "SELECT COUNT(*) FROM messages WHERE uid = 'client-uid-1'") == [(1,)]


def test_turn_uid_retry_is_idempotent(engine: SessionEngine) -> None:
    """Retrying a whole turn with the same uids returns the same seqs and writes nothing."""
    sid = engine.start_session("cli", cwd="")
    turn = [{**m, "uid": f"t-{i}"} for i, m in enumerate(TOOL_TURN)]
    first = engine.append_turn(sid, turn)
    count = event_count(engine)
    assert engine.append_turn(sid, turn) == first
    assert event_count(engine) == count


def test_turn_mixing_stored_and_new_uids_is_refused(engine: SessionEngine) -> None:
    """A turn that repeats some stored uids next to new ones is refused and writes nothing."""
    sid = engine.start_session("cli", cwd="")
    engine.append_message(sid, "user", "one", uid="u-1")
    count = event_count(engine)
    with pytest.raises(ValidationError, match="u-1"):
        engine.append_turn(
            sid,
            [{"role": "user", "content": "one", "uid": "u-1"}, {"role": "user", "content": "2"}],
        )
    assert event_count(engine) == count


def test_duplicate_uid_inside_one_turn_is_refused(engine: SessionEngine) -> None:
    """Two messages of one turn cannot share a uid."""
    sid = engine.start_session("cli", cwd="")
    with pytest.raises(ValidationError, match="appears twice"):
        engine.append_turn(
            sid,
            [
                {"role": "user", "content": "a", "uid": "same"},
                {"role": "assistant", "content": "b", "uid": "same"},
            ],
        )
    assert engine.get(sid).message_count == 0


def test_expected_version_conflict(engine: SessionEngine) -> None:
    """A writer naming a stale version gets ConflictError with both versions; nothing is written."""
    sid = engine.start_session("cli", cwd="")
    engine.append_message(sid, "user", "hi", expected_version=1)
    count = event_count(engine)
    with pytest.raises(ConflictError) as caught:
        engine.append_message(sid, "user", "stale", expected_version=1)
    assert (caught.value.expected, caught.value.actual) == (1, 2)
    assert sid in str(caught.value)
    with pytest.raises(ConflictError):
        engine.rewind(sid, 0, expected_version=7)
    assert event_count(engine) == count


def test_conflict_between_two_engines(home: Path) -> None:
    """Two engines on one file: the second writer with the old version is refused."""
    with SessionEngine.open(home) as first, SessionEngine.open(home) as second:
        sid = first.start_session("cli", cwd="")
        version = second.get(sid).version
        first.append_message(sid, "user", "winner", expected_version=version)
        with pytest.raises(ConflictError):
            second.append_message(sid, "user", "loser", expected_version=version)
        assert [m.content for m in messages_of(second.store.connection(), sid)] == ["winner"]


def test_rewind_and_rewind_turns(engine: SessionEngine, home: Path) -> None:
    """Rewind keeps messages up to the target; rewind_turns drops the last user turns."""
    sid = engine.start_session("cli", cwd="")
    for i in range(3):
        engine.append_message(sid, "user", f"q{i}")
        engine.append_message(sid, "assistant", f"a{i}")
    assert engine.rewind(sid, 3) == [4, 5]
    assert engine.rewind(sid, 3) == []
    assert engine.rewind_turns(sid, 1) == [2, 3]
    state = engine.get(sid)
    assert state.active_seqs() == [0, 1] and state.active_count == 2
    with pytest.raises(InvariantError, match="fewer than 5"):
        engine.rewind_turns(sid, 5)
    assert engine.rewind_turns(sid, 1) == [0, 1]
    assert engine.get(sid).active == []
    assert_verified(engine)


def test_edit_replaces_in_place(engine: SessionEngine) -> None:
    """Editing keeps the old row as 'edited' and shows the new one where it stood."""
    sid = engine.start_session("cli", cwd="")
    engine.append_message(sid, "user", "typo")
    engine.append_message(sid, "assistant", "answer")
    new = engine.edit_message(sid, 0, "fixed")
    assert new == 2
    conn = engine.store.connection()
    assert [(m.seq, m.content) for m in messages_of(conn, sid)] == [(2, "fixed"), (1, "answer")]
    every = messages_of(conn, sid, scope="all")
    assert [(m.seq, m.state) for m in every] == [(0, "edited"), (2, "active"), (1, "active")]
    with pytest.raises(InvariantError, match="not an active message"):
        engine.edit_message(sid, 0, "again")


def test_compact_and_continue(engine: SessionEngine, home: Path) -> None:
    """Compaction archives messages behind a summary; continue_session starts a #N child."""
    sid = engine.start_session("cli", title="long talk", cwd="", system_prompt="be brief")
    for i in range(4):
        engine.append_message(sid, "user" if i % 2 == 0 else "assistant", f"m{i}")
    assert engine.compact(sid, [0, 1], [{"role": "user", "content": "summary of 0-1"}]) == [4]
    state = engine.get(sid)
    assert state.compacted_count == 2 and state.active_seqs() == [2, 3, 4]
    child = engine.continue_session(
        sid, [{"role": "user", "content": "summary"}], carry=[{"role": "user", "content": "tail"}]
    )
    parent = engine.get(sid)
    assert parent.continued_into == child and parent.ended and parent.end_reason == "compression"
    kid = engine.get(child)
    assert (kid.parent_id, kid.parent_kind, kid.source) == (sid, "compression", "cli")
    assert kid.title == "long talk #2" and kid.title_kind == "lineage"
    assert kid.prompt_hash == parent.prompt_hash and kid.message_count == 2
    assert engine.stored_prompt(child) == "be brief"
    with pytest.raises(InvariantError, match="already continues"):
        engine.continue_session(sid, [])
    assert_verified(engine)


def test_curation_flags(engine: SessionEngine) -> None:
    """Pin, archive, end, reopen and hide change the state; repeats are no-ops."""
    sid = engine.start_session("cli", cwd="")
    assert engine.pin(sid).pinned
    v = engine.get(sid).version
    assert engine.pin(sid).version == v
    assert engine.archive(sid, "user").archived == "user"
    assert engine.archive(sid, "sweep").archived == "user"
    assert engine.unarchive(sid).archived == ""
    assert engine.end_session(sid, "user_exit").ended
    assert not engine.reopen(sid).ended
    assert engine.hide(sid).hidden
    assert engine.set_reasoning(sid, "low").reasoning == "low"
    with pytest.raises(ValidationError, match="reasoning level"):
        engine.set_reasoning(sid, "max")
    with pytest.raises(ValidationError, match="archive reason"):
        engine.archive(sid, "later")


def test_new_message_revives_ended_and_swept_session(engine: SessionEngine) -> None:
    """A message to an ended, sweep-archived session reopens and unarchives it."""
    sid = engine.start_session("cli", cwd="")
    engine.end_session(sid, "user_exit")
    engine.archive(sid, "sweep")
    engine.append_message(sid, "user", "back again")
    state = engine.get(sid)
    assert not state.ended and state.archived == ""


def test_prompt_storage(engine: SessionEngine) -> None:
    """Stored prompts are content-addressed and shared; clearing drops the session's hash."""
    a = engine.start_session("cli", cwd="", system_prompt="You are helpful.")
    b = engine.start_session("cli", cwd="", system_prompt="You are helpful.")
    assert engine.get(a).prompt_hash == engine.get(b).prompt_hash
    assert rows(engine, "SELECT COUNT(*) FROM prompts") == [(1,)]
    assert engine.request_prompt_refresh([a, b]) == 2
    assert engine.get(a).refresh_pending
    sha = engine.store_system_prompt(a, "You are terse.", reason="refresh", tools=["x"])
    state = engine.get(a)
    assert state.prompt_hash == sha and not state.refresh_pending and state.tools == ["x"]
    assert engine.stored_prompt(a) == "You are terse."
    assert engine.clear_stored_prompt(a).prompt_hash == ""
    assert engine.stored_prompt(a) is None


def test_usage_is_counted(engine: SessionEngine) -> None:
    """Token usage from messages and from record_usage adds up."""
    sid = engine.start_session("cli", cwd="")
    engine.append_message(sid, "assistant", "x", tokens_in=10, tokens_out=3)
    engine.record_usage(sid, 5, 2, model="m")
    state = engine.get(sid)
    assert (state.tokens_in, state.tokens_out) == (15, 5)


def test_failed_command_leaves_no_partial_rows(engine: SessionEngine) -> None:
    """A turn refused on its last message stores none of its messages."""
    sid = engine.start_session("cli", cwd="")
    with pytest.raises(ValidationError):
        engine.append_turn(
            sid, [{"role": "user", "content": "ok"}, {"role": "user", "content": ""}]
        )
    assert rows(engine, "SELECT COUNT(*) FROM messages") == [(0,)]
    assert engine.get(sid).next_seq == 0


def test_reader_sees_only_committed_rows(engine: SessionEngine) -> None:
    """A second connection never sees a half-applied transaction."""
    sid = engine.start_session("cli", cwd="")
    reader = engine.backend.reader()
    try:
        with engine.store.transaction() as batch:
            state = batch.load(sid)
            events = agg.append(state, [to_draft({"role": "user", "content": "x"})], at=batch.now)
            batch.record(sid, events)
            batch.flush()
            assert batch.conn.execute("SELECT COUNT(*) FROM messages").fetchall() == [(1,)]
            assert reader.execute("SELECT COUNT(*) FROM messages").fetchall() == [(0,)]
        assert reader.execute("SELECT COUNT(*) FROM messages").fetchall() == [(1,)]
    finally:
        reader.close()


def test_integer_clock_still_verifies(home: Path) -> None:
    """A clock returning ints is stored as floats, so a rebuild reproduces the head rows."""
    ticks = iter(range(1_700_000_000, 1_700_001_000))
    with SessionEngine.open(home, clock=lambda: next(ticks)) as eng:
        sid = eng.start_session("cli", cwd="")
        eng.append_message(sid, "user", "hi")
        eng.continue_session(sid, [{"role": "user", "content": "summary"}])
    assert_verified(home / "state.db")


def test_unknown_message_fields_are_refused(engine: SessionEngine) -> None:
    """A misspelt message field (tool_call= for tool_calls=) is an error, not silently dropped."""
    sid = engine.start_session("cli")
    before = event_count(engine)
    with pytest.raises(ValidationError, match="unknown field"):
        engine.append_message(sid, "assistant", "x", tool_call=[{"id": "c", "name": "ls"}])
    assert event_count(engine) == before
