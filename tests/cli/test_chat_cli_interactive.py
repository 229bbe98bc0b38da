"""Interactive ``hermes`` under a pseudo-terminal (pexpect): recap, slash commands, conflicts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect

from hermes_es.projections.catalog import connect

ENTRY = "from hermes_es.cli import main; main()"
PROMPT = "hermes> "


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    env.update({"HERMES_HOME": str(home), "COLUMNS": "200", "NO_COLOR": "1", **extra})
    return env


def spawn(home: Path, *args: str, **extra: str) -> pexpect.spawn:
    """Start hermes on a pseudo-terminal."""
    return pexpect.spawn(
        sys.executable,
        ["-c", ENTRY, *args],
        env=_env(home, **extra),
        cwd=str(home),
        encoding="utf-8",
        timeout=30,
        dimensions=(50, 200),
    )


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run hermes non-interactively."""
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        env=_env(home),
        cwd=home,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def rows(home: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """Read the store directly."""
    conn = connect(home / "state.db")
    try:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def say(child: pexpect.spawn, line: str) -> str:
    """Send a line and return what was printed before the next prompt."""
    child.sendline(line)
    child.expect_exact(PROMPT)
    return str(child.before)


def test_resume_draws_recap_panel_and_exit_prints_resume_hint(tmp_path: Path) -> None:
    """-c draws the recap (truncated text, tool calls collapsed, tool results hidden)."""
    assert run(tmp_path, "--source", "cli", "-q", "word " * 200).returncode == 0
    run(tmp_path, "-c", "-q", "please\nrun: echo TOOLRESULT")
    sid = str(rows(tmp_path, "SELECT id FROM sessions")[0][0])
    child = spawn(tmp_path, "-c")
    child.expect_exact(PROMPT)
    shown = str(child.before)
    assert f"Recap of {sid}" in shown and "last 2 exchanges" in shown
    assert "…" in shown and "[1 tool call: echo]" in shown
    assert "TOOLRESULT" not in shown.split("[1 tool call: echo]")[1].split("\n")[0]
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    assert f"Resume with: hermes --resume {sid}" in str(child.before)


def test_minimal_resume_display_prints_one_line(tmp_path: Path) -> None:
    """display.resume_display: minimal prints a one-line summary instead of the panel."""
    (tmp_path / "config.yaml").write_text("display:\n  resume_display: minimal\n")
    run(tmp_path, "-q", "hello")
    child = spawn(tmp_path, "-c")
    child.expect_exact(PROMPT)
    assert "↪ Resumed session" in str(child.before) and "Recap of" not in str(child.before)
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_slash_commands_end_to_end(tmp_path: Path) -> None:
    """/new, /title, /sessions (oneshot hidden), /rewind, /reasoning, /compress, /save, /exit."""
    run(tmp_path, "-q", "hidden oneshot")
    (tmp_path / "config.yaml").write_text("sessions:\n  compress_keep_last: 2\n")
    child = spawn(tmp_path, "/new", "alpha")
    child.expect_exact(PROMPT)
    for i in range(3):
        assert "Offline reply" in say(child, f"turn {i}")
    assert 'Title set: "beta"' in say(child, "/title beta")
    listing = say(child, "/sessions")
    assert "beta" in listing and "hidden oneshot" not in listing
    assert "Rewound 1 turn(s): 2 messages" in say(child, "/rewind")
    assert "Reasoning set to high" in say(child, "/reasoning high")
    compressed = say(child, "/compress")
    assert "continuing in" in compressed
    saved = say(child, f"/save md {tmp_path / 'out.md'}")
    assert "Saved" in saved and (tmp_path / "out.md").exists()
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    titles = [r[0] for r in rows(tmp_path, "SELECT title FROM sessions ORDER BY started_at, id")]
    assert "beta" in titles and "beta #2" in titles
    assert rows(tmp_path, "SELECT reasoning FROM sessions WHERE title='beta #2'") == [("high",)]


def test_save_json_over_guard_reports_4131(tmp_path: Path) -> None:
    """/save json above sessions.max_export_messages is refused with error code 4131."""
    (tmp_path / "config.yaml").write_text("sessions:\n  max_export_messages: 2\n")
    child = spawn(tmp_path)
    child.expect_exact(PROMPT)
    say(child, "one")
    say(child, "two")
    assert "Error 4131" in say(child, f"/save json {tmp_path}")
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_second_chat_on_held_session_is_offered_a_choice(tmp_path: Path) -> None:
    """A second interactive chat on a live session can fork a branch; both keep their turns."""
    first = spawn(tmp_path, "/new", "shared")
    first.expect_exact(PROMPT)
    say(first, "from first")
    second = spawn(tmp_path, "-c", "shared")
    second.expect_exact("[r]ead-only attach, [f]ork a branch, [t]ake over")
    second.sendline("f")
    second.expect_exact(PROMPT)
    assert "forked a branch" in str(second.before)
    say(second, "from branch")
    say(first, "first again")
    for child in (first, second):
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    shared = rows(tmp_path, "SELECT id FROM sessions WHERE title='shared'")[0][0]
    users = rows(
        tmp_path,
        "SELECT session_id, content FROM messages WHERE role='user' ORDER BY session_id, seq",
    )
    assert [c for s, c in users if s == shared] == ["from first", "first again"]
    assert [c for s, c in users if s != shared] == ["from first", "from branch"]


def test_reset_starts_a_linked_conversation_and_failed_new_changes_nothing(tmp_path: Path) -> None:
    """/reset links the new session with parent kind 'reset'; /new with a taken title fails,
    leaves the chat on its session (not ended), and the next turn gives no stale warning."""
    assert run(tmp_path, "/new", "taken", "-q", "first").returncode == 0
    child = spawn(tmp_path)
    child.expect_exact(PROMPT)
    say(child, "hello")
    out = say(child, "/reset")
    assert "Reset: new conversation" in out
    [(child_id, parent_id, kind)] = rows(
        tmp_path, "SELECT id, parent_id, parent_kind FROM sessions WHERE parent_kind = 'reset'"
    )
    ended = rows(tmp_path, "SELECT ended, end_reason FROM sessions WHERE id = ?", parent_id)
    assert kind == "reset" and ended == [(1, "new_session")]
    out = say(child, "/new taken")
    assert "already used" in out
    out = say(child, "still here")
    assert "changed by another writer" not in out and "still here" in out
    assert rows(tmp_path, "SELECT ended FROM sessions WHERE id = ?", child_id) == [(0,)]
    last = rows(
        tmp_path,
        "SELECT session_id FROM messages WHERE role = 'user' ORDER BY at DESC, seq DESC LIMIT 1",
    )
    assert last == [(child_id,)]
    child.sendline("/exit")
    child.expect(pexpect.EOF)
