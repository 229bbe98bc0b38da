"""Import: all-or-nothing validation, restored flags, archived history, re-import without dups."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.export import ExportOptions, export_sessions
from hermes_es.commands.importing import import_backups
from hermes_es.errors import ConflictError, GuardError, ValidationError
from hermes_es.projections import search as search_projection
from hermes_es.projections.rebuild import verify
from hermes_es.queries.transcript import messages_of

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.commands.export_helpers import delegate, open_engine, plain_session, rich_session
except ModuleNotFoundError:  # pragma: no cover
    from export_helpers import (  # type: ignore[no-redef,import-not-found]
        delegate,
        open_engine,
        plain_session,
        rich_session,
    )


def _line(sid: str, **extra: object) -> str:
    obj: dict[str, object] = {
        "format": "hermes-es.session/1",
        "id": sid,
        "source": "cli",
        "started_at": 1.0,
        "messages": [{"role": "user", "content": f"hi from {sid}", "at": 2.0}],
    }
    obj.update(extra)
    return json.dumps(obj)


def _count(engine: SessionEngine) -> int:
    return int(engine.store.connection().execute("SELECT COUNT(*) FROM sessions").fetchall()[0][0])


def _write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_restored_rows_are_history_not_context(tmp_path: Path) -> None:
    """Imported rows show in the display transcript but are never live model context."""
    a = open_engine(tmp_path / "a")
    sid = rich_session(a)
    export_sessions(a.store.connection(), tmp_path / "o", [sid], ExportOptions())
    b = open_engine(tmp_path / "b")
    import_backups(b.store, [tmp_path / "o"])
    conn = b.store.connection()
    assert messages_of(conn, sid, scope="context") == []
    assert len(messages_of(conn, sid, scope="display")) == 8
    assert all(m.imported for m in messages_of(conn, sid, scope="all"))
    b.append_message(sid, "user", "continuing after restore")
    assert [m.content for m in messages_of(conn, sid, scope="context")] == [
        "continuing after restore"
    ]


def test_flags_are_restored_and_sweep_archive_returns_on_resume(tmp_path: Path) -> None:
    """Pinned, hidden and a sweep archive survive the restore; the sweep archive lifts on resume."""
    a = open_engine(tmp_path / "a")
    sid = rich_session(a)
    user_archived = plain_session(a, "20240101_000001_bbbbbb", 2)
    a.archive(user_archived, "user")
    export_sessions(a.store.connection(), tmp_path / "o", [sid, user_archived], ExportOptions())
    b = open_engine(tmp_path / "b")
    import_backups(b.store, [tmp_path / "o"])
    state = b.get(sid)
    assert (state.pinned, state.archived, state.hidden) == (True, "sweep", True)
    assert (state.title, state.reasoning, state.tokens_in) == ("Rich one", "low", 18)
    assert b.stored_prompt(sid) == "You are helpful."
    assert b.resume(sid).archived == ""
    assert b.resume(user_archived).archived == "user"


def test_old_export_without_flags_restores_visible(tmp_path: Path) -> None:
    """A line with no flag fields (and no per-message state) restores as a plain visible session."""
    path = _write(tmp_path / "old.jsonl", _line("old1"))
    b = open_engine(tmp_path / "b")
    import_backups(b.store, [path])
    state = b.get("old1")
    assert (state.pinned, state.archived, state.hidden) == (False, "", False)
    [row] = messages_of(b.store.connection(), "old1", scope="display")
    assert row.state == "active" and row.imported


def test_reimport_creates_no_duplicates(tmp_path: Path) -> None:
    """Importing the same file twice skips sessions already present with the same content."""
    path = _write(
        tmp_path / "b.jsonl", _line("s1"), _line("s2", parent_id="s1", parent_kind="delegate")
    )
    b = open_engine(tmp_path / "b")
    assert import_backups(b.store, [path]).imported == ["s1", "s2"]
    again = import_backups(b.store, [path])
    assert again.imported == [] and again.skipped == ["s1", "s2"]
    assert _count(b) == 2
    assert len(messages_of(b.store.connection(), "s1", scope="all")) == 1


def test_id_clash_with_different_content_is_refused(tmp_path: Path) -> None:
    """An existing id with different content refuses the whole import, naming file and line."""
    b = open_engine(tmp_path / "b")
    import_backups(b.store, [_write(tmp_path / "one.jsonl", _line("s1"))])
    b.append_message("s1", "user", "added later")
    path = _write(tmp_path / "two.jsonl", _line("fresh"), _line("s1"))
    with pytest.raises(ValidationError, match=r"two\.jsonl:2: session s1 already exists"):
        import_backups(b.store, [path])
    assert _count(b) == 1


def test_malformed_line_imports_nothing(tmp_path: Path) -> None:
    """A line that is not JSON refuses the import and names file and line."""
    path = _write(tmp_path / "bad.jsonl", _line("s1"), '{"id": "s2", "messages": [', _line("s3"))
    b = open_engine(tmp_path / "b")
    with pytest.raises(ValidationError, match=r"bad\.jsonl:2: Input data was truncated"):
        import_backups(b.store, [path])
    assert _count(b) == 0


def test_wrong_type_names_line_and_path(tmp_path: Path) -> None:
    """A wrong type names file, line and the JSON path of the bad value."""
    bad = _line("s2", messages=[{"role": "user", "content": "x", "at": "yesterday"}])
    path = _write(tmp_path / "t.jsonl", _line("s1"), bad)
    b = open_engine(tmp_path / "b")
    with pytest.raises(ValidationError, match=r"t\.jsonl:2: .*\$\.messages\[0\]\.at"):
        import_backups(b.store, [path])
    bad_role = _line("s3", messages=[{"role": "narrator", "content": "x"}])
    with pytest.raises(ValidationError, match=r"\$\.messages\[0\]\.role"):
        import_backups(b.store, [_write(tmp_path / "r.jsonl", bad_role)])
    assert _count(b) == 0


def test_parent_cycle_imports_nothing(tmp_path: Path) -> None:
    """Parent links that form a cycle refuse the import."""
    path = _write(
        tmp_path / "c.jsonl",
        _line("a", parent_id="b", parent_kind="branch"),
        _line("b", parent_id="a", parent_kind="branch"),
    )
    b = open_engine(tmp_path / "b")
    with pytest.raises(ValidationError, match=r"c\.jsonl:\d: parent links form a cycle"):
        import_backups(b.store, [path])
    assert _count(b) == 0


def test_duplicate_id_imports_nothing(tmp_path: Path) -> None:
    """The same id twice with different content refuses the import, naming both places."""
    one = _write(tmp_path / "one.jsonl", _line("s1"))
    two = _write(tmp_path / "two.jsonl", _line("s0"), _line("s1", title="other"))
    b = open_engine(tmp_path / "b")
    with pytest.raises(
        ValidationError,
        match=r"two\.jsonl:2: duplicate session id 's1' with different content "
        r"\(first at .*one\.jsonl:1\)",
    ):
        import_backups(b.store, [one, two])
    assert _count(b) == 0


def test_invalid_value_inside_restore_imports_nothing(tmp_path: Path) -> None:
    """A value the aggregate refuses (a bad source tag) rolls back every session of the import."""
    path = _write(tmp_path / "v.jsonl", _line("ok"), _line("bad", source="NOT VALID"))
    b = open_engine(tmp_path / "b")
    with pytest.raises(ValidationError, match=r"v\.jsonl:2: invalid source tag"):
        import_backups(b.store, [path])
    assert _count(b) == 0


@pytest.mark.parametrize("bad", ["receipt:zzz", "a\nb", "../../evil", ".", "x" * 129])
def test_invalid_session_id_imports_nothing(tmp_path: Path, bad: str) -> None:
    """A backup id that is not a safe session id refuses the import, naming file, line and id."""
    path = _write(tmp_path / "i.jsonl", _line("ok"), _line(bad))
    b = open_engine(tmp_path / "b")
    with pytest.raises(ValidationError, match=r"i\.jsonl:2: invalid session id") as info:
        import_backups(b.store, [path])
    assert repr(bad) in info.value.message
    assert _count(b) == 0
    assert all(d.equal for d in verify(b.store.path))


def test_prompt_stream_id_is_refused_as_invalid_not_as_conflict(tmp_path: Path) -> None:
    """An id naming an existing prompt stream is refused as a reserved id, not a version clash."""
    b = open_engine(tmp_path / "b")
    import_backups(b.store, [_write(tmp_path / "one.jsonl", _line("s1", system_prompt="Be kind."))])
    sha = hashlib.sha256(b"Be kind.").hexdigest()
    path = _write(tmp_path / "p.jsonl", _line(f"prompt:{sha}", system_prompt="Be kind."))
    with pytest.raises(ValidationError, match=r"p\.jsonl:1: invalid session id 'prompt:") as info:
        import_backups(b.store, [path])
    assert "reserved" in info.value.message
    assert _count(b) == 1
    assert all(d.equal for d in verify(b.store.path))


def test_children_listed_before_parents_import(tmp_path: Path) -> None:
    """A child line before its parent still imports, parent first, with the lineage edge."""
    path = _write(
        tmp_path / "o.jsonl", _line("kid", parent_id="mom", parent_kind="delegate"), _line("mom")
    )
    b = open_engine(tmp_path / "b")
    assert import_backups(b.store, [path]).imported == ["mom", "kid"]
    rows = b.store.connection().execute("SELECT child_id, parent_id, kind FROM lineage").fetchall()
    assert [tuple(r) for r in rows] == [("kid", "mom", "delegate")]


def test_import_guard_refuses_oversized_session(tmp_path: Path) -> None:
    """A session above max_import_messages refuses the import, naming file and line."""
    msgs = [{"role": "user", "content": str(i)} for i in range(4)]
    path = _write(tmp_path / "g.jsonl", _line("small"), _line("big", messages=msgs))
    b = open_engine(tmp_path / "b")
    with pytest.raises(GuardError, match=r"g\.jsonl:2: session big holds 4 messages"):
        import_backups(b.store, [path], max_messages=3)
    assert _count(b) == 0
    assert len(import_backups(b.store, [path], max_messages=0).imported) == 2


def test_title_clash_imports_nothing(tmp_path: Path) -> None:
    """A restored title already used by another session refuses the import."""
    b = open_engine(tmp_path / "b")
    b.start_session("cli", session_id="mine", title="Taken", cwd="/")
    path = _write(tmp_path / "t.jsonl", _line("theirs", title="taken"))
    with pytest.raises(ValidationError, match=r"t\.jsonl:1: title 'taken' is already used"):
        import_backups(b.store, [path])
    assert _count(b) == 1


def test_delegates_restore_with_their_parent(tmp_path: Path) -> None:
    """A parent and its delegates from one export directory restore with the delegate edges."""
    a = open_engine(tmp_path / "a")
    sid = rich_session(a)
    kid = delegate(a, sid, 1)
    export_sessions(a.store.connection(), tmp_path / "o", [kid, sid], ExportOptions(fmt="json"))
    b = open_engine(tmp_path / "b")
    report = import_backups(b.store, [tmp_path / "o"])
    assert sorted(report.imported) == sorted([sid, kid])
    assert b.get(kid).parent_id == sid


@pytest.mark.parametrize("body", ["", "\n\n  \n"])
@pytest.mark.parametrize("name", ["empty.jsonl", "empty.json"])
def test_empty_backup_file_is_refused(tmp_path: Path, body: str, name: str) -> None:
    """A backup file holding no session fails validation naming the file; nothing is imported."""
    b = open_engine(tmp_path / "b")
    empty = tmp_path / name
    empty.write_text(body)
    good = _write(tmp_path / "good.jsonl", _line("20240101_000000_000001"))
    with pytest.raises(ValidationError, match=f"{empty}: empty backup file"):
        import_backups(b.store, [good, empty])
    assert _count(b) == 0


def test_directory_without_backups_is_refused(tmp_path: Path) -> None:
    """An empty directory (or one holding only a manifest) is an error, not '0 imported'."""
    b = open_engine(tmp_path / "b")
    folder = tmp_path / "backup"
    folder.mkdir()
    with pytest.raises(ValidationError, match=f"no backup files .* in {folder}"):
        import_backups(b.store, [folder])
    (folder / "manifest.jsonl").write_text("{}\n")
    (folder / "x.prompts.jsonl").write_text("{}\n")
    with pytest.raises(ValidationError, match="no backup files"):
        import_backups(b.store, [folder])
    assert _count(b) == 0


def test_log_clash_at_write_names_file_and_line(tmp_path: Path) -> None:
    """A session whose stream already has events the sessions table lacks: the version clash
    names the file and line, and nothing of the import is kept."""
    b = open_engine(tmp_path / "b")
    import_backups(b.store, [_write(tmp_path / "first.jsonl", _line("s1"))])
    with b.store.transaction() as batch:  # the projection loses the row; the log keeps s1
        batch.conn.execute("DELETE FROM sessions WHERE id = 's1'")
    path = _write(tmp_path / "again.jsonl", _line("s0"), _line("s1"))
    with pytest.raises(ConflictError, match=r"again\.jsonl:2: session s1 clashes") as info:
        import_backups(b.store, [path])
    assert "nothing was imported" in info.value.message
    assert info.value.subject == "s1"
    assert _count(b) == 0


def test_imported_sessions_are_indexed_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forty sessions restored in one transaction: their full-text rows are written together
    before it commits (one index write and one merge step, not one a session), and every one
    is found."""
    steps: list[str] = []
    monkeypatch.setattr(search_projection, "upkeep_step", lambda conn, table: steps.append(table))
    lines = [
        _line(f"s{k:02d}", messages=[{"role": "user", "content": f"word{k} shared", "at": 2.0}])
        for k in range(40)
    ]
    engine = open_engine(tmp_path / "h")
    import_backups(engine.store, [_write(tmp_path / "b.jsonl", *lines)])
    assert steps == ["messages_fts"]
    for k in (0, 17, 39):
        assert [h.session_id for h in engine.search(f"word{k}")] == [f"s{k:02d}"]
    assert len(engine.search("shared", limit=100)) == 40


def test_import_into_an_empty_store_fills_the_index_as_a_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Into a store with no session the index is filled as a rebuild fills it (no merge while
    the rows are written, one segment after), with FTS5's defaults back once it committed;
    into a store that holds sessions it is written as live rows are."""
    engine = open_engine(tmp_path / "h")
    projections = engine.store.projections
    calls: list[str] = []
    for name in ("begin_fill", "end_fill"):
        real = getattr(projections, name)
        monkeypatch.setattr(
            projections, name, lambda conn, real=real, name=name: (calls.append(name), real(conn))
        )
    first = [
        _line(f"a{k:02d}", messages=[{"role": "user", "content": f"alpha{k}"}]) for k in range(30)
    ]
    import_backups(engine.store, [_write(tmp_path / "a.jsonl", *first)])
    assert calls == ["begin_fill", "end_fill"]
    conn = engine.store.connection()
    assert conn.execute("SELECT count(DISTINCT segid) FROM messages_fts_idx").fetchall() == [(1,)]
    options = dict(conn.execute("SELECT k, v FROM messages_fts_config").fetchall())
    assert (options.get("automerge", 4), options.get("crisismerge", 16)) == (4, 16)
    calls.clear()
    more = [
        _line(f"b{k:02d}", messages=[{"role": "user", "content": f"beta{k}"}]) for k in range(5)
    ]
    import_backups(engine.store, [_write(tmp_path / "b.jsonl", *more)])
    assert calls == []
    assert [h.session_id for h in engine.search("alpha7")] == ["a07"]
    assert [h.session_id for h in engine.search("beta3")] == ["b03"]
    assert all(d.equal for d in verify(engine.store.path))
