"""``hermes sessions export`` and ``import`` on a PostgreSQL store.

The same sessions, copied from SQLite to a server store, export to the same files from both
stores (backups and the displayed history alike, with the filters); a backup exported from the
server imports into another server store; ``--delete-after-verified`` deletes there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_es.cli.app import cli
from hermes_es.commands.copy_store import copy_store
from hermes_es.commands.engine import SessionEngine
from hermes_es.store.backend import open_backend
from tests.pg_server import PgServer
from tests.projections.test_rebuild import populate


def _hermes(store: str, home: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--store", store, *args], env={"HERMES_HOME": str(home)})
    assert result.exit_code == 0, (args, result.output)
    assert "Traceback" not in result.output
    return result.output


EXPORTED_AT = re.compile(rb'"exported_at": ?[0-9.]+|"sha256": ?"[0-9a-f]+"')


def _files(directory: Path) -> dict[str, bytes]:
    """Each exported file's bytes, the time of the export left out (and so the manifest's
    file hashes, which cover it)."""
    return {p.name: EXPORTED_AT.sub(b"", p.read_bytes()) for p in sorted(directory.iterdir())}


@pytest.mark.parametrize(
    "options",
    [
        ("--format", "jsonl", "--source", "cli"),
        ("--format", "json", "--since", "2000-01-01"),
        ("--format", "md", "--title", "e"),
        ("--format", "html", "--source", "cli", "--until", "2100-01-01"),
    ],
)
def test_server_store_exports_what_sqlite_exports(
    tmp_path: Path, pg_url: str, options: tuple[str, ...]
) -> None:
    """The same sessions export to byte-identical files from SQLite and from PostgreSQL."""
    sqlite = tmp_path / "state.db"
    with SessionEngine.open(sqlite, actor="test") as eng:
        populate(eng)
    copy_store(open_backend(str(sqlite)), open_backend(pg_url))
    home = tmp_path / "home"
    home.mkdir()
    _hermes(str(sqlite), home, "sessions", "export", str(tmp_path / "a"), *options)
    _hermes(pg_url, home, "sessions", "export", str(tmp_path / "b"), *options)
    exported = _files(tmp_path / "a")
    assert len(exported) > 1  # a manifest and at least one session
    assert _files(tmp_path / "b") == exported


def test_backup_from_a_server_store_imports_and_deletes_after_verify(
    tmp_path: Path, pg_server: PgServer, pg_url: str
) -> None:
    """A session exported from one server store imports into another with the same
    transcript; ``--delete-after-verified --yes`` deletes it from the first."""
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", title="to move", cwd="")
        eng.append_message(sid, "user", "a message worth keeping")
        eng.append_message(sid, "assistant", "kept")
    home = tmp_path / "home"
    home.mkdir()
    out = tmp_path / "backup"
    _hermes(
        pg_url, home, "sessions", "export", str(out), "--session-id", sid,
        "--delete-after-verified", "--yes",
    )  # fmt: skip
    other = pg_server.database()
    try:
        [backup] = out.glob(f"{sid}*.jsonl")
        _hermes(other, home, "sessions", "import", str(backup))
        shown = json.loads(_hermes(other, home, "sessions", "show", sid, "--json"))
        assert [m["content"] for m in shown["messages"]] == ["a message worth keeping", "kept"]
    finally:
        pg_server.drop(other)
    listed = json.loads(_hermes(pg_url, home, "sessions", "list", "--json"))
    assert [r["id"] for r in listed] == []


def test_save_a_session_from_a_server_store_connection(tmp_path: Path, pg_url: str) -> None:
    """``save_session`` (the chat's ``/save``) given the engine or the server store's own
    connection writes the session's history."""
    from hermes_es.commands.export import save_session

    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", title="saved", cwd="")
        eng.append_message(sid, "user", "worth a file")
        by_engine = save_session(eng, sid, "md", tmp_path / "a.md")
        by_conn = save_session(eng.store.connection(), sid, "md", tmp_path / "b.md")
    assert by_engine.messages == by_conn.messages == 1
    text = (tmp_path / "b.md").read_text()
    assert "worth a file" in text and text == (tmp_path / "a.md").read_text()
