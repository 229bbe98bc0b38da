"""An event row that cannot be decoded is diagnosed by every reader of the log, never thrown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from hermes_es.commands.engine import SessionEngine

ENTRY = "from hermes_es.cli import main; main()"


def hermes(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real ``hermes`` CLI in a subprocess on ``home``."""
    env = {**os.environ, "HERMES_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def make_store(home: Path) -> str:
    """A store with one session of a few messages and one other session."""
    with SessionEngine.open(home) as eng:
        sid = eng.start_session("cli", cwd=str(home), title="damaged one")
        eng.append_message(sid, "user", "first words")
        eng.append_message(sid, "assistant", "second words")
        eng.append_message(sid, "user", "third words")
        other = eng.start_session("cli", cwd=str(home))
        eng.append_message(other, "user", "untouched")
        return sid


def damage(
    home: Path, sid: str, version: int, *, state: bytes = b"\xc1\xff\x00", topic: str | None = None
) -> int:
    """Overwrite one stored event's payload (or topic); returns its log position."""
    conn = apsw.Connection(str(home / "state.db"))
    try:
        row = conn.execute(
            "SELECT id FROM events WHERE originator_id = ? AND originator_version = ?",
            (sid, version),
        ).fetchall()
        position = int(row[0][0])
        if topic is not None:
            conn.execute("UPDATE events SET topic = ? WHERE id = ?", (topic, position))
        else:
            conn.execute("UPDATE events SET state = ? WHERE id = ?", (state, position))
        return position
    finally:
        conn.close()


def assert_diagnosed(done: subprocess.CompletedProcess[str], sid: str, position: int) -> None:
    """Exit 1, no traceback, and the message names the event, its version and its stream."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert f"event {position} (version 2 of stream {sid!r}" in done.stderr + done.stdout
    assert "cannot be decoded" in done.stderr + done.stdout


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, str, int]:
    """A store whose session has an undecodable second event."""
    sid = make_store(tmp_path)
    return tmp_path, sid, damage(tmp_path, sid, 2)


def test_verify_names_the_undecodable_event(damaged: tuple[Path, str, int]) -> None:
    """``sessions verify`` reports which event of which stream cannot be decoded (exit 1)."""
    home, sid, position = damaged
    assert_diagnosed(hermes(home, "sessions", "verify", "--quiet"), sid, position)


def test_rebuild_names_the_undecodable_event_and_keeps_the_live_tables(
    damaged: tuple[Path, str, int],
) -> None:
    """``rebuild-projections`` refuses with the event named; live tables and search survive."""
    home, sid, position = damaged
    assert_diagnosed(hermes(home, "sessions", "rebuild-projections", "--quiet"), sid, position)
    conn = apsw.Connection(str(home / "state.db"))
    try:
        leftovers = conn.execute(
            "SELECT name FROM sqlite_schema WHERE name LIKE 'rebuild%'"
        ).fetchall()
        assert leftovers == []
        assert conn.execute("SELECT COUNT(*) FROM message_rows").fetchall()[0][0] == 4
    finally:
        conn.close()


def test_history_names_the_undecodable_event(damaged: tuple[Path, str, int]) -> None:
    """``sessions history`` reports the undecodable event instead of a traceback."""
    home, sid, position = damaged
    assert_diagnosed(hermes(home, "sessions", "history", sid), sid, position)


def test_show_as_of_names_the_undecodable_event(damaged: tuple[Path, str, int]) -> None:
    """``sessions show --as-of`` replays through the damaged event: it names it (exit 1)."""
    home, sid, position = damaged
    assert_diagnosed(hermes(home, "sessions", "show", sid, "--as-of", "3"), sid, position)


def test_doctor_full_reports_the_undecodable_event(damaged: tuple[Path, str, int]) -> None:
    """``doctor --full`` is an error naming the event, and never says healthy."""
    home, sid, position = damaged
    done = hermes(home, "doctor", "--full", "--json")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    rows = json.loads(done.stdout)["findings"]
    events = [r for r in rows if r["check"] == "store.events"]
    assert events[0]["level"] == "error"
    assert f"event {position} (version 2 of stream {sid!r}" in events[0]["message"]
    verify = [r for r in rows if r["check"] == "store.verify"]
    assert verify[0]["level"] == "error" and "cannot be decoded" in verify[0]["message"]


def test_plain_doctor_decodes_the_newest_events(damaged: tuple[Path, str, int]) -> None:
    """Plain ``doctor`` decodes events too: it fails and does not say everything is healthy."""
    home, sid, position = damaged
    done = hermes(home, "doctor")
    assert done.returncode == 1, done.stdout
    assert f"event {position} (version 2 of stream {sid!r}" in done.stdout
    assert "everything looks healthy" not in done.stdout
    assert "cannot be decoded" in done.stdout
    assert "Traceback" not in done.stderr


def test_unknown_topic_is_diagnosed(tmp_path: Path) -> None:
    """A topic no version of hermes registered is named as undecodable, not a LookupError."""
    sid = make_store(tmp_path)
    position = damage(tmp_path, sid, 2, topic="hermes.session.made_up")
    done = hermes(tmp_path, "sessions", "verify", "--quiet")
    assert_diagnosed(done, sid, position)
    assert "hermes.session.made_up" in done.stderr


def test_doctor_that_could_not_decode_everything_does_not_claim_health(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the decode budget runs out before the oldest events, the verdict says so."""
    from click.testing import CliRunner

    from hermes_es.cli.app import cli
    from hermes_es.queries import health

    make_store(tmp_path)
    monkeypatch.setattr(health, "DECODE_BATCH", 1)
    from hermes_es.commands import doctor

    monkeypatch.setattr(doctor, "DECODE_BUDGET_SECONDS", 0.0)
    result = CliRunner().invoke(cli, ["doctor"], env={"HERMES_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert "everything looks healthy" not in result.output
    assert "older events were not decoded" in result.output
