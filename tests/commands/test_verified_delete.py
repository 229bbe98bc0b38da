"""Export-then-delete: version comparison inside the delete transaction, and no trace left."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_es.commands.delete import DeleteRefusedError
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.export import ExportOptions, export_then_delete
from hermes_es.queries.history import deletion_receipts

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.commands.export_helpers import delegate, open_engine, rich_session
except ModuleNotFoundError:  # pragma: no cover
    from export_helpers import (  # type: ignore[no-redef,import-not-found]
        delegate,
        open_engine,
        rich_session,
    )

MARKER = "ZQX7MARKER41"
SID = "20240101_000000_aaaaaa"


def _setup(tmp_path: Path) -> tuple[SessionEngine, str, list[str]]:
    engine = open_engine(tmp_path / "home")
    sid = rich_session(engine, marker=MARKER)
    engine.reopen(sid)
    kids = [delegate(engine, sid, n, marker=MARKER) for n in (1, 2)]
    return engine, sid, kids


def _during_export(
    tmp_path: Path, change: Callable[[SessionEngine], object]
) -> Callable[[int, int], None]:
    """A progress callback that makes ``change`` from another connection, once, mid-export."""
    done: list[bool] = []

    def tick(_done: int, _total: int) -> None:
        if not done:
            done.append(True)
            other = open_engine(tmp_path / "home")
            try:
                change(other)
            finally:
                other.close()

    return tick


def _refused(tmp_path: Path, change: Callable[[SessionEngine, str, list[str]], object]) -> str:
    engine, sid, kids = _setup(tmp_path)
    tick = _during_export(tmp_path, lambda other: change(other, sid, kids))
    with pytest.raises(DeleteRefusedError) as info:
        export_then_delete(engine, tmp_path / "out", sid, ExportOptions(fmt="md"), progress=tick)
    for s in [sid, *kids]:
        assert engine.get(s).version > 0
    assert not deletion_receipts(engine.store.connection(), sid)
    return info.value.message


def test_refused_after_append(tmp_path: Path) -> None:
    """An append during the export refuses the delete and names the session."""
    message = _refused(tmp_path, lambda e, sid, kids: e.append_message(sid, "user", "late"))
    assert "changed after the export" in message and "nothing was deleted" in message


def test_refused_after_rewind(tmp_path: Path) -> None:
    """A rewind during the export refuses the delete."""
    message = _refused(tmp_path, lambda e, sid, kids: e.rewind_turns(sid, 1))
    assert "changed after the export" in message


def test_refused_after_compaction(tmp_path: Path) -> None:
    """An in-place compaction during the export refuses the delete."""

    def compact(e: SessionEngine, sid: str, kids: list[str]) -> None:
        e.compact(sid, [6], [{"role": "assistant", "content": "short"}])

    assert "changed after the export" in _refused(tmp_path, compact)


def test_refused_after_edit(tmp_path: Path) -> None:
    """A rewrite (edit) during the export refuses the delete."""
    message = _refused(tmp_path, lambda e, sid, kids: e.edit_message(sid, 6, "rewritten"))
    assert "changed after the export" in message


def test_refused_when_delegate_added(tmp_path: Path) -> None:
    """A delegate started during the export refuses the delete and is named."""
    message = _refused(tmp_path, lambda e, sid, kids: delegate(e, sid, 3))
    assert f"delegate {SID}_d3 was added" in message


def test_refused_when_delegate_changed(tmp_path: Path) -> None:
    """A message appended to a delegate during the export refuses the delete."""
    message = _refused(tmp_path, lambda e, sid, kids: e.append_message(kids[0], "user", "more"))
    assert f"{SID}_d1 changed after the export" in message


@pytest.mark.parametrize(
    "change",
    [
        lambda e, sid: e.pin(sid, False),
        lambda e, sid: e.set_title(sid, "Renamed meanwhile"),
        lambda e, sid: e.archive(sid, "user"),
    ],
    ids=["pin", "title", "archive"],
)
def test_allowed_after_non_display_change(
    tmp_path: Path, change: Callable[[SessionEngine, str], object]
) -> None:
    """Changes that do not alter the display (pin, title, archive) do not block the delete."""
    engine, sid, kids = _setup(tmp_path)
    tick = _during_export(tmp_path, lambda other: change(other, sid))
    done = export_then_delete(engine, tmp_path / "out", sid, ExportOptions(), progress=tick)
    assert sorted(done.deleted) == sorted([sid, *kids])


def test_each_delegate_exported_in_its_own_file(tmp_path: Path) -> None:
    """The session and each delegate get their own verified file and manifest line."""
    engine, sid, kids = _setup(tmp_path)
    done = export_then_delete(engine, tmp_path / "out", sid, ExportOptions(fmt="jsonl"))
    manifest = [
        json.loads(x) for x in (tmp_path / "out" / "manifest.jsonl").read_text().split("\n") if x
    ]
    assert [m["session_id"] for m in manifest] == [sid, *kids]
    assert len({m["file"] for m in manifest}) == 3
    receipts = deletion_receipts(engine.store.connection(), sid)
    assert receipts and receipts[0].reason == "export-verified"
    assert sorted(done.deleted) == sorted([sid, *kids])


def test_delete_leaves_no_trace_in_db_or_wal(tmp_path: Path) -> None:
    """After the verified delete neither state.db nor its WAL holds the deleted text."""
    engine, sid, _kids = _setup(tmp_path)
    db = tmp_path / "home" / "state.db"
    assert MARKER.encode() in db.read_bytes() + _wal(db)
    export_then_delete(engine, tmp_path / "out", sid, ExportOptions(fmt="jsonl"))
    engine.close()
    assert MARKER.encode() not in db.read_bytes()
    assert MARKER.encode() not in _wal(db)
    assert any(MARKER in p.read_text() for p in (tmp_path / "out").iterdir())


def _wal(db: Path) -> bytes:
    wal = db.with_name(db.name + "-wal")
    return wal.read_bytes() if wal.exists() else b""
