"""``hermes sessions export`` / ``import``: error paths, exit codes and end-to-end runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_es.cli.app import cli

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.commands.export_helpers import delegate, open_engine, rich_session
    from tests.commands.test_import_hermes_db import build
except ModuleNotFoundError:  # pragma: no cover
    import importlib

    _h = importlib.import_module("export_helpers")
    delegate, open_engine, rich_session = _h.delegate, _h.open_engine, _h.rich_session
    build = importlib.import_module("test_import_hermes_db").build


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A HERMES_HOME holding one rich session with one delegate."""
    h = tmp_path / "home"
    engine = open_engine(h)
    sid = rich_session(engine)
    delegate(engine, sid, 1)
    engine.close()
    return h


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess with HERMES_HOME=home."""
    code = "from hermes_es.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env={"HERMES_HOME": str(home), "PATH": "/usr/bin:/bin"},
        cwd=home.parent,
        timeout=120,
    )


def invoke(home: Path, *args: str) -> object:
    """Run the CLI in-process with CliRunner."""
    return CliRunner().invoke(cli, list(args), env={"HERMES_HOME": str(home)})


def test_bare_bulk_export_is_refused(home: Path, tmp_path: Path) -> None:
    """An export with neither --session-id nor a filter exits 2 and writes nothing."""
    result = run(home, "sessions", "export", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "bare bulk export is refused" in result.stderr
    assert not (tmp_path / "out").exists()


def test_unresolvable_session_id_creates_no_file(home: Path, tmp_path: Path) -> None:
    """An unknown --session-id exits 1 and creates no output."""
    result = run(home, "sessions", "export", str(tmp_path / "out"), "--session-id", "nope")
    assert result.returncode == 1
    assert result.stderr.startswith("Error: no session matches 'nope'")
    assert not (tmp_path / "out").exists()


def test_delete_after_verified_needs_yes(home: Path, tmp_path: Path) -> None:
    """--delete-after-verified without --yes (or without --session-id) exits 2, deletes nothing."""
    out = tmp_path / "out"
    no_yes = invoke(home, "sessions", "export", str(out), "--session-id", "Rich one",
                    "--delete-after-verified")  # fmt: skip
    assert no_yes.exit_code == 2  # type: ignore[attr-defined]
    no_id = invoke(home, "sessions", "export", str(out), "--source", "cli",
                   "--delete-after-verified", "--yes")  # fmt: skip
    assert no_id.exit_code == 2  # type: ignore[attr-defined]
    assert "needs exactly one --session-id and --yes" in no_id.output  # type: ignore[attr-defined]
    assert not out.exists()


def test_only_user_prompts_rejects_html(home: Path, tmp_path: Path) -> None:
    """--only user-prompts with --format html is a usage error."""
    result = invoke(home, "sessions", "export", str(tmp_path / "o"), "--source", "cli",
                    "--format", "html", "--only", "user-prompts")  # fmt: skip
    assert result.exit_code == 2  # type: ignore[attr-defined]


def test_filtered_export_and_import_round_trip(home: Path, tmp_path: Path) -> None:
    """A filtered jsonl export imports into a fresh home and re-exports to the same rows."""
    out = tmp_path / "out"
    first = run(home, "sessions", "export", str(out), "--source", "cli", "--json")
    assert first.returncode == 0, first.stderr
    files = json.loads(first.stdout)
    assert [f["session_id"] for f in files] == ["20240101_000000_aaaaaa"]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    imported = run(fresh, "sessions", "import", str(out))
    assert imported.returncode == 0, imported.stderr
    assert "Imported 1 sessions (10 messages)" in imported.stdout
    again = run(fresh, "sessions", "import", str(out / files[0]["file"]))
    assert "1 already present" in again.stdout
    second = run(fresh, "sessions", "export", str(tmp_path / "two"), "--pinned", "--json")
    f2 = json.loads(second.stdout)[0]
    strip = [
        {k: v for k, v in json.loads(p.read_text()).items() if k != "exported_at"}
        for p in (out / files[0]["file"], tmp_path / "two" / f2["file"])
    ]
    assert strip[0] == strip[1]


def test_export_delete_after_verified_end_to_end(home: Path, tmp_path: Path) -> None:
    """--delete-after-verified --yes exports parent and delegate, then deletes both."""
    out = tmp_path / "out"
    result = run(home, "sessions", "export", str(out), "--format", "md", "--session-id",
                 "Rich one", "--delete-after-verified", "--yes")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Verified and deleted 2 session(s)" in result.stdout
    manifest = (out / "manifest.jsonl").read_text().splitlines()
    assert len(manifest) == 2
    history = run(home, "sessions", "history", "20240101_000000_aaaaaa")
    assert "was deleted" in history.stdout and "export-verified" in history.stdout


def test_import_malformed_file_reports_line(home: Path, tmp_path: Path) -> None:
    """A malformed backup exits 1 naming file and line."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "messages": [{"role": 5}]}\n')
    result = run(home, "sessions", "import", str(bad))
    assert result.returncode == 1
    assert "bad.jsonl:1:" in result.stderr and "$.messages[0].role" in result.stderr


def test_import_from_hermes_db(tmp_path: Path) -> None:
    """--from-hermes-db migrates a Hermes state.db and reports counts and skipped rows."""
    src = tmp_path / "src" / "state.db"
    src.parent.mkdir()
    build(src)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    result = run(fresh, "sessions", "import", "--from-hermes-db", str(src))
    assert result.returncode == 0, result.stderr
    assert "Source: 3 sessions" in result.stdout
    assert "Imported 3 sessions, 8 messages" in result.stdout
    assert "skipped:" in result.stdout


def test_import_from_hermes_db_over_the_cap_exits_1_naming_it(tmp_path: Path) -> None:
    """A session over sessions.max_import_messages fails the run (exit 1, named), the rest land."""
    src = tmp_path / "src" / "state.db"
    src.parent.mkdir()
    build(src)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "config.yaml").write_text("sessions:\n  max_import_messages: 2\n")
    result = run(fresh, "sessions", "import", "--from-hermes-db", str(src))
    assert result.returncode == 1
    assert "Imported 2 sessions" in result.stdout
    assert "not imported: root" in result.stderr and "Traceback" not in result.stderr


def test_import_needs_files_or_hermes_db(home: Path) -> None:
    """Import with neither (or both) sources is a usage error."""
    result = invoke(home, "sessions", "import")
    assert result.exit_code == 2  # type: ignore[attr-defined]


def test_import_empty_file_or_folder_fails(home: Path, tmp_path: Path) -> None:
    """An empty backup file or folder exits 1 with an Error naming it, never 'Imported 0'."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    folder = tmp_path / "nothing"
    folder.mkdir()
    for target, said in ((empty, "empty backup file"), (folder, "no backup files")):
        result = run(home, "sessions", "import", str(target))
        assert result.returncode == 1, result.stdout
        assert f"Error: {target}" in result.stderr or f"in {target}" in result.stderr
        assert said in result.stderr and "Imported" not in result.stdout


def test_redacted_export_scrubs_the_title(tmp_path: Path) -> None:
    """`sessions export --source cli --redact` leaves no key in the body, manifest or file name."""
    key = "sk-proj-" + "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8L9z0X1c2V3b4"
    h = tmp_path / "home"
    engine = open_engine(h)
    sid = engine.start_session("cli", session_id="20240101_000000_rrrrrr", title=f"key {key}")
    engine.append_message(sid, "user", "hello")
    engine.close()
    for fmt in ("jsonl", "md"):
        out = tmp_path / f"o-{fmt}"
        result = run(
            h, "sessions", "export", str(out), "--source", "cli", "--redact", "--format", fmt
        )
        assert result.returncode == 0, result.stderr
        names = [p.name for p in out.iterdir()]
        assert len(names) == 2 and not any("sk-proj" in n for n in names)
        for path in out.iterdir():
            assert key not in path.read_text()
        assert "[REDACTED:" in json.loads((out / "manifest.jsonl").read_text())["title"]


def test_chat_save_refuses_existing_file_unless_forced(tmp_path: Path) -> None:
    """/save onto an existing file prints Error: and keeps it; /save ... --force overwrites it."""
    import os

    import pexpect

    target = tmp_path / "hosts"
    target.write_text("keep me\n")
    target.chmod(0o644)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    env.update({"HERMES_HOME": str(tmp_path), "COLUMNS": "200", "NO_COLOR": "1"})
    child = pexpect.spawn(
        sys.executable,
        ["-c", "from hermes_es.cli import main; main()"],
        env=env,
        cwd=str(tmp_path),
        encoding="utf-8",
        timeout=30,
    )

    def say(line: str) -> str:
        child.sendline(line)
        child.expect_exact("hermes> ")
        return str(child.before)

    child.expect_exact("hermes> ")
    say("hello")
    refused = say(f"/save md {target}")
    assert "Error:" in refused and "already exists" in refused and "Traceback" not in refused
    assert target.read_text() == "keep me\n"
    assert "Saved" in say(f"/save md {target} --force")
    assert target.read_text().startswith("# ") and target.stat().st_mode & 0o777 == 0o644
    child.sendline("/exit")
    child.expect(pexpect.EOF)
