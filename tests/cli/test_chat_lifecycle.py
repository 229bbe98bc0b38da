"""Chat lifecycle rules: empty messages start nothing, finite runs end, /rewind checks N."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pexpect

from hermes_es.projections.catalog import connect

ENTRY = "from hermes_es.cli import main; main()"


def hermes(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run hermes with its own HERMES_HOME, stdin not a terminal, offline responder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    env.update(HERMES_HOME=str(home), HERMES_RESPONDER="offline")
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def sessions(home: Path) -> list[tuple[str, int, str]]:
    """(id, ended, end_reason) of every session."""
    conn = connect(home / "state.db")
    try:
        return [
            (str(a), int(b), str(c))
            for a, b, c in conn.execute("SELECT id, ended, end_reason FROM sessions")
        ]
    finally:
        conn.close()


def test_empty_message_starts_no_session(tmp_path: Path) -> None:
    """`hermes -q ""` exits 1 with an error and leaves no empty session behind."""
    assert hermes(tmp_path, "-q", "real one", "--source", "cli").returncode == 0
    done = hermes(tmp_path, "-q", "   ", "--source", "cli")
    assert done.returncode == 1
    assert "Error: empty message" in done.stderr and "Traceback" not in done.stderr
    assert len(sessions(tmp_path)) == 1


def test_finite_run_ends_its_session_and_the_next_message_reopens_it(tmp_path: Path) -> None:
    """A one-shot run ends its session (prune can see it); continuing it reopens the same id."""
    assert hermes(tmp_path, "-q", "first", "--source", "cli").returncode == 0
    [(sid, ended, reason)] = sessions(tmp_path)
    assert (ended, reason) == (1, "run_complete")
    assert hermes(tmp_path, "-r", sid, "-q", "second").returncode == 0
    [(again, ended, _)] = sessions(tmp_path)
    assert again == sid and ended == 1
    history = hermes(tmp_path, "sessions", "history", sid).stdout
    assert "hermes.session.reopened" in history


def test_rewind_argument_must_be_a_positive_number(tmp_path: Path) -> None:
    """`/rewind x` and `/rewind -2` are usage errors that rewind nothing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    env.update(HERMES_HOME=str(tmp_path), HERMES_RESPONDER="offline")
    child = pexpect.spawn(
        sys.executable, ["-c", ENTRY], env=env, cwd=str(tmp_path), encoding="utf-8", timeout=30
    )
    child.expect("> ")
    child.sendline("hello there")
    child.expect("Offline reply")
    child.expect("> ")
    for bad in ("x", "-2"):
        child.sendline(f"/rewind {bad}")
        child.expect("usage: /rewind")
        child.expect("> ")
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    [(sid, ended, reason)] = sessions(tmp_path)
    assert (ended, reason) == (1, "user_exit")
    shown = hermes(tmp_path, "sessions", "show", sid).stdout
    assert "hello there" in shown and "Offline reply" in shown
