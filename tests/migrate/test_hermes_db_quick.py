"""The Hermes reader's one-pass message path gives exactly what the checked path gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_es.migrate import hermes_db
from hermes_es.migrate.hermes_db import LegacyMessage, read_hermes_db

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.migrate.hermes_schema import HermesStateDb
except ModuleNotFoundError:  # prepend mode puts this folder itself on sys.path
    from hermes_schema import HermesStateDb  # type: ignore[no-redef,import-not-found]

CALL = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


def _build(path: Path) -> None:
    """Typical rows and every odd kind the checked path reports or converts."""
    with HermesStateDb(path, 30) as db:
        db.session("s", started_at=5.0)
        db.message("s", "user", "plain text", timestamp=6.0, token_count=3)
        db.message(
            "s", "assistant", None, tool_calls=json.dumps([CALL]), finish_reason="tool_calls"
        )
        db.message("s", "tool", "result", tool_call_id="c1", tool_name="read_file", timestamp=7)
        db.message("s", "assistant", "one call", tool_calls=json.dumps(CALL))
        db.message("s", "assistant", "blank calls", tool_calls="  ")
        db.message("s", "assistant", "archived", active=0, compacted=1, reasoning="why")
        db.message("s", "assistant", "rewound", active=0, compacted=0, reasoning_content="rc")
        db.message("s", "assistant", "extra columns", display_identity=b"\x01\xff", observed=1)
        db.message("s", "user", "text time", timestamp="later")
        db.message("s", "user", 42, timestamp=8.0)
        db.message("s", "user", b"bytes \xff", timestamp=9.0)
        db.message("s", "assistant", "bad json", tool_calls="[{not json")
        db.message("s", "assistant", "string json", tool_calls='"a string"')
        db.message("s", "user", "odd count", token_count="many")
        db.message("s", "user", "float count", token_count=4.0)
        db.message("s", "user", "text flag", active="yes")
        db.message("s", "narrator", "unknown role")


def _read(path: Path) -> tuple[list[LegacyMessage], list[str]]:
    with read_hermes_db(path) as db:
        return list(db.messages("s")), list(db.skipped)


def test_quick_path_equals_checked_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same messages (fields, extra, flags, tool calls) and the same reported problems."""
    path = tmp_path / "state.db"
    _build(path)
    quick, quick_skipped = _read(path)
    monkeypatch.setattr(hermes_db, "_plain_message", lambda values, columns, session_id: None)
    checked, checked_skipped = _read(path)
    assert quick == checked
    assert quick_skipped == checked_skipped
    assert len(quick) == 16 and len(checked_skipped) >= 6


def test_quick_path_takes_plain_rows_and_leaves_odd_ones(tmp_path: Path) -> None:
    """Plain rows are read in one pass; a NULL timestamp or a BLOB goes to the checked path."""
    row: dict[str, hermes_db.SQLiteValue] = {
        "id": 1, "session_id": "s", "role": "user", "content": "hi", "timestamp": 1.5,
        "tool_calls": None, "active": 1, "compacted": 0, "api_content": "raw",
    }  # fmt: skip

    def plain(changed: dict[str, hermes_db.SQLiteValue]) -> LegacyMessage | None:
        values = {**row, **changed}
        names = sorted(values)
        columns = hermes_db.MessageColumns(names)
        return hermes_db._plain_message(tuple(values[n] for n in names), columns, "s")

    message = plain({})
    assert message is not None and message.extra == {"api_content": "raw"}
    assert message.content == "hi" and message.active and not message.compacted
    assert plain({"timestamp": None}) is None
    assert plain({"content": b"x"}) is None
    assert plain({"role": "session_meta"}) is None


def test_quick_path_needs_the_columns_it_reads() -> None:
    """A file without a ``timestamp`` column: every row takes the checked path (which
    reports the missing time and uses the session start)."""
    columns = hermes_db.MessageColumns(["content", "id", "role", "session_id"])
    assert not columns.plain
    assert hermes_db._plain_message(("hi", 1, "user", "s"), columns, "s") is None
