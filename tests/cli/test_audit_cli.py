"""``hermes sessions history | show | verify | rebuild-projections`` on a real HERMES_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hermes_es.cli.app import cli
from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.catalog import connect

pytestmark = pytest.mark.sqlite_only  # the CLI runs on $HERMES_HOME's state.db

SID = "20240305_091523_a1b2c3"
OTHER = "20240305_091523_a1ffff"


def run(home: Path, *args: str) -> Result:
    """Invoke the CLI in-process with HERMES_HOME=home."""
    return CliRunner().invoke(cli, list(args), env={"HERMES_HOME": str(home)})


def run_process(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a real process with HERMES_HOME=home."""
    env = {**os.environ, "HERMES_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-c", "from hermes_es.cli import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def store(home: Path, engine: SessionEngine) -> Path:
    """A home with one edited, rewound conversation (SID, titled) and a second session."""
    engine.start_session("cli", session_id=SID, cwd="", title="audit me")
    engine.append_message(SID, "user", "what is in the repo?")  # v2, seq 0
    engine.append_turn(  # v3, seqs 1-3
        SID,
        [
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "ls"}]},
            {"role": "tool", "content": "README.md", "tool_call_id": "c1", "tool_name": "ls"},
            {"role": "assistant", "content": "Just a README."},
        ],
    )
    engine.edit_message(SID, 0, "what files are in the repo?")  # v4, seq 4
    engine.append_message(SID, "user", "thanks")  # v5, seq 5
    engine.rewind(SID, 4)  # v6: removes 5
    engine.pin(SID)  # v7
    engine.start_session("cli", session_id=OTHER, cwd="")
    engine.close()
    return home


def as_json(result: Result) -> Any:
    """Parse a command's JSON output (asserting it succeeded)."""
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_history_lists_every_event(store: Path) -> None:
    """history prints a header, then one line per event with version, type, actor and a
    summary."""
    result = run(store, "sessions", "history", SID)
    assert result.exit_code == 0, result.output
    header, *lines = result.stdout.splitlines()
    assert header.split() == ["VERSION", "TIME", "EVENT", "ACTOR", "SUMMARY"]
    assert len(lines) == 7
    assert lines[0].startswith("v1") and "hermes.session.started" in lines[0]
    assert "'audit me'" in lines[0] and "test" in lines[0]
    assert "turn of 3" in lines[2] and "→ ls" in lines[2]
    assert "edited #0 → #4" in lines[3]
    assert "rewound to #4 (1 removed)" in lines[5]
    assert "hermes.session.pinned" in lines[6]


def test_history_json(store: Path) -> None:
    """history --json gives versions 1..n with types, actors, times and summaries."""
    data = as_json(run(store, "sessions", "history", "audit me", "--json"))
    assert data["session_id"] == SID and data["deletions"] == []
    events = data["events"]
    assert [e["version"] for e in events] == list(range(1, 8))
    assert events[1]["type"] == "hermes.message.appended"
    assert {e["actor"] for e in events} == {"test"}
    assert all(isinstance(e["at"], float) and e["summary"] for e in events)


def test_history_by_prefix(store: Path) -> None:
    """A unique id prefix resolves; the full id is printed in JSON."""
    assert (
        as_json(run(store, "sessions", "history", "20240305_091523_a1b", "--json"))["session_id"]
        == SID
    )


def test_show_current_transcript(store: Path) -> None:
    """show prints the display transcript: the edit in place, the rewound message gone."""
    result = run(store, "sessions", "show", SID)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "what files are in the repo?" in out
    assert "what is in the repo?" not in out and "thanks" not in out
    assert "tool call ls" in out
    assert out.index("#4 user") < out.index("#1 assistant")


def test_show_json_and_all(store: Path) -> None:
    """show --json lists messages in display order; --all adds inactive rows with states."""
    data = as_json(run(store, "sessions", "show", SID, "--json"))
    assert data["as_of"] is None
    assert [m["seq"] for m in data["messages"]] == [4, 1, 2, 3]
    every = as_json(run(store, "sessions", "show", SID, "--all", "--json"))["messages"]
    assert {m["seq"]: m["state"] for m in every} == {
        0: "edited",
        4: "active",
        1: "active",
        2: "active",
        3: "active",
        5: "rewound",
    }


@pytest.mark.parametrize(
    ("version", "seqs"),
    [
        (1, []),
        (2, [0]),
        (3, [0, 1, 2, 3]),
        (4, [4, 1, 2, 3]),
        (5, [4, 1, 2, 3, 5]),
        (7, [4, 1, 2, 3]),
    ],
)
def test_show_as_of(store: Path, version: int, seqs: list[int]) -> None:
    """show --as-of V prints the transcript as it stood at version V."""
    data = as_json(run(store, "sessions", "show", SID, "--as-of", str(version), "--json"))
    assert data["as_of"] == version
    assert [m["seq"] for m in data["messages"]] == seqs


def test_show_as_of_text(store: Path) -> None:
    """The text form of --as-of shows the original wording before the edit."""
    result = run(store, "sessions", "show", SID, "--as-of", "3")
    assert result.exit_code == 0
    assert "what is in the repo?" in result.stdout


def test_show_as_of_must_be_positive(store: Path) -> None:
    """--as-of 0 is a usage error (exit 2) naming the option and its range."""
    result = run(store, "sessions", "show", SID, "--as-of", "0")
    assert result.exit_code == 2
    assert "Invalid value for '--as-of'" in result.stderr and "x>=1" in result.stderr


@pytest.mark.parametrize("version", ["8", "999"])
def test_show_as_of_past_last_version_is_refused(store: Path, version: str) -> None:
    """--as-of beyond the session's last event exits 1 naming the valid range, not rc 0."""
    result = run(store, "sessions", "show", SID, "--as-of", version)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith(
        f"Error: session {SID} has only 7 events; --as-of must be 1..7, got {version}"
    )


def test_show_as_of_last_version_is_current(store: Path) -> None:
    """--as-of at exactly the last version equals the current transcript."""
    last = as_json(run(store, "sessions", "show", SID, "--as-of", "7", "--json"))["messages"]
    now = as_json(run(store, "sessions", "show", SID, "--json"))["messages"]
    assert last == now


def test_verify_passes(store: Path) -> None:
    """verify exits 0 and says the projections match the log."""
    result = run(store, "sessions", "verify")
    assert result.exit_code == 0, result.output
    assert "projections match the log" in result.stdout
    assert all(line.startswith("ok") for line in result.stdout.splitlines()[:-1])
    data = as_json(run(store, "sessions", "verify", "--json"))
    assert data["ok"] is True and all(t["equal"] for t in data["tables"])


def test_verify_reports_corruption_then_rebuild_repairs(store: Path) -> None:
    """A hand-edited projection row makes verify exit 1 per table; rebuild fixes it."""
    conn = connect(store / "state.db")
    conn.execute("UPDATE sessions SET title = 'forged' WHERE id = ?", (OTHER,))
    conn.execute("DELETE FROM message_rows WHERE session_id = ? AND seq = 2", (SID,))
    conn.close()
    result = run(store, "sessions", "verify")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert any(line.startswith("DIFF") and " sessions " in line for line in lines)
    messages = next(line for line in lines if line.split()[1] == "message_rows")
    assert messages.startswith("DIFF") and "live=5" in messages and "rebuilt=6" in messages
    assert any(line.startswith("ok") and " lineage " in line for line in lines)
    assert lines[-1] == "2 table(s) differ from the log"
    data = json.loads(run(store, "sessions", "verify", "--json").stdout)
    assert data["ok"] is False
    assert sorted(t["table"] for t in data["tables"] if not t["equal"]) == [
        "message_rows",
        "sessions",
    ]

    rebuilt = run(store, "sessions", "rebuild-projections", "--quiet")
    assert rebuilt.exit_code == 0, rebuilt.output
    assert rebuilt.stdout.strip() == "rebuilt projections from 8 events"
    assert run(store, "sessions", "verify").exit_code == 0
    assert run(store, "sessions", "history", "forged").exit_code == 1


def test_unknown_session_is_a_clean_error(store: Path) -> None:
    """An unknown id exits 1 with 'Error: …' on stderr and no traceback."""
    for command in ("history", "show"):
        result = run_process(store, "sessions", command, "20991231_000000_ffffff")
        assert result.returncode == 1
        assert result.stderr.startswith("Error: no session matches '20991231_000000_ffffff'")
        assert "Traceback" not in result.stderr and result.stdout == ""


def test_ambiguous_prefix_lists_candidates(store: Path) -> None:
    """An ambiguous prefix exits 1 naming both candidates."""
    result = run(store, "sessions", "show", "20240305")
    assert result.exit_code == 1
    assert SID in result.stderr and OTHER in result.stderr
    assert "give more of the id" in result.stderr


def test_commands_without_a_store(home: Path) -> None:
    """With no state.db yet, every audit command exits 1 with a clear error, creating nothing."""
    for args in (
        ("history", SID),
        ("show", SID),
        ("verify",),
        ("rebuild-projections",),
    ):
        result = run_process(home, "sessions", *args)
        assert result.returncode == 1, args
        assert result.stderr.startswith("Error: ") and "Traceback" not in result.stderr
    assert not (home / "state.db").exists()


def test_rebuild_in_a_process_then_verify(store: Path) -> None:
    """rebuild-projections as a real process leaves a store that verify accepts."""
    result = run_process(store, "sessions", "rebuild-projections")
    assert result.returncode == 0, result.stderr
    assert "rebuilt projections from 8 events" in result.stdout
    check = run_process(store, "sessions", "verify", "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["ok"] is True
