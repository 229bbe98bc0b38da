"""Interactive resume (pexpect): the deferred resume work is recorded however the user leaves
the first prompt, the prompt is reached without the write side, and its failure ends the run."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import pexpect
import pytest

from hermes_es.store.message_text import register_message_text
from tests.terminal_signals import default_terminal_signals

ENTRY = "from hermes_es.cli import main; main()"
PROMPT = "hermes> "
RESUMED = "hermes.session.resumed"
ENDED = "hermes.session.ended"

PROBE = """
import atexit, sys
from hermes_es.cli import chat

def loaded():
    return ",".join(n for n in ("eventsourcing", "yaml") if n in sys.modules) or "-"

start = chat.Deferred.start
seen = []

def probed_start(self):
    if not seen:
        seen.append(1)
        print("PROBE-AT-PROMPT loaded=" + loaded(), file=sys.stderr, flush=True)
    start(self)

chat.Deferred.start = probed_start
atexit.register(lambda: print("PROBE-AT-EXIT loaded=" + loaded(), file=sys.stderr, flush=True))
from hermes_es.cli import main
main()
"""
"""Runs the real CLI, reporting which heavy modules are loaded the moment the deferred resume
thread is started: the main thread calls ``input()`` right after, so this is what the process
holds when the prompt is drawn (probing inside ``input()`` would race the started thread)."""


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    env.update(
        {"HERMES_HOME": str(home), "HERMES_RESPONDER": "offline", "COLUMNS": "200", "NO_COLOR": "1"}
    )
    return env


def spawn(
    home: Path, *args: str, code: str = ENTRY, preexec: Callable[[], None] | None = None
) -> pexpect.spawn:
    """Start hermes (or ``code``) on a pseudo-terminal."""
    return pexpect.spawn(
        sys.executable,
        ["-c", code, *args],
        env=_env(home),
        cwd=str(home),
        encoding="utf-8",
        timeout=20,
        dimensions=(50, 200),
        preexec_fn=preexec or default_terminal_signals,
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
        timeout=30,
    )


def new_session(home: Path) -> str:
    """Record a CLI session with one exchange (never resumed); return its id."""
    done = run(home, "--source", "cli", "-q", "hello")
    assert done.returncode == 0, done.stderr
    conn = apsw.Connection(str(home / "state.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return str(conn.execute("SELECT id FROM sessions").fetchall()[0][0])
    finally:
        conn.close()


def history(home: Path, sid: str) -> list[str]:
    """Event types of the session, as ``hermes sessions history ID --json`` lists them."""
    done = run(home, "sessions", "history", sid, "--json")
    assert done.returncode == 0, done.stderr
    return [str(e["type"]) for e in json.loads(done.stdout)["events"]]


def user_messages(home: Path, sid: str) -> list[str]:
    """The session's user message texts, read from the store."""
    conn = apsw.Connection(str(home / "state.db"), flags=apsw.SQLITE_OPEN_READONLY)
    register_message_text(conn)
    try:
        rows = conn.execute(
            "SELECT content FROM messages WHERE session_id=? AND role='user' ORDER BY seq", (sid,)
        ).fetchall()
        return [str(r[0]) for r in rows]
    finally:
        conn.close()


def finish(child: pexpect.spawn) -> tuple[int | None, str]:
    """Wait for the child to exit; return its exit status and what it printed last."""
    child.expect(pexpect.EOF)
    out = str(child.before)
    child.close()
    return child.exitstatus, out


def assert_resume_recorded(home: Path, sid: str) -> None:
    """Exactly one resume is recorded, before the exit ended the session."""
    types = history(home, sid)
    assert types.count(RESUMED) == 1, types
    last_end = len(types) - 1 - types[::-1].index(ENDED) if ENDED in types else -1
    assert types.index(RESUMED) < last_end, types


def test_ctrl_d_at_first_prompt_still_records_the_resume(tmp_path: Path) -> None:
    """Ctrl-D at the first prompt of `hermes -r ID` still records hermes.session.resumed."""
    sid = new_session(tmp_path)
    child = spawn(tmp_path, "-r", sid)
    child.expect_exact(PROMPT)
    child.sendeof()
    status, out = finish(child)
    assert status == 0, out
    assert f"Resume with: hermes --resume {sid}" in out
    assert_resume_recorded(tmp_path, sid)


def test_ctrl_c_at_first_prompt_exits_promptly_and_records_the_resume(tmp_path: Path) -> None:
    """Ctrl-C at the first prompt ends the run within seconds and the resume is recorded."""
    sid = new_session(tmp_path)
    child = spawn(tmp_path, "-r", sid)
    child.expect_exact(PROMPT)
    pressed = time.monotonic()
    child.sendintr()
    # A hang (a busy wait, a join on a blocked thread) takes 30 s or more; 15 s leaves room for
    # a loaded machine without hiding one.
    child.expect(pexpect.EOF, timeout=15)
    waited = time.monotonic() - pressed
    out = str(child.before)
    child.close()
    assert waited < 15, waited
    assert child.exitstatus == 0, out
    assert "Traceback" not in out and f"Resume with: hermes --resume {sid}" in out
    assert_resume_recorded(tmp_path, sid)


def test_exit_right_away_records_the_resume(tmp_path: Path) -> None:
    """/exit as the first input line of `hermes -r ID` records hermes.session.resumed."""
    sid = new_session(tmp_path)
    child = spawn(tmp_path, "-r", sid)
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    status, out = finish(child)
    assert status == 0, out
    assert_resume_recorded(tmp_path, sid)


@pytest.mark.parametrize("how", [["-r", "ID"], ["-c"]], ids=["resume-id", "continue"])
def test_prompt_is_reached_without_eventsourcing_or_yaml(tmp_path: Path, how: list[str]) -> None:
    """When the resume prompt is drawn, neither eventsourcing nor yaml has been imported."""
    sid = new_session(tmp_path)
    child = spawn(tmp_path, *[sid if a == "ID" else a for a in how], code=PROBE)
    child.expect(r"PROBE-AT-PROMPT loaded=(\S+)")
    assert f"Recap of {sid}" in str(child.before)  # the probe ran on the resume path
    at_prompt = child.match.group(1)
    child.expect_exact(PROMPT)
    child.sendeof()
    child.expect(r"PROBE-AT-EXIT loaded=(\S+)")
    at_exit = child.match.group(1)
    status, out = finish(child)
    assert status == 0, out
    assert at_prompt == "-", f"imported before the prompt: {at_prompt}"
    # the probe does see the write side once the deferred resume has run
    assert "eventsourcing" in at_exit.split(","), at_exit
    assert_resume_recorded(tmp_path, sid)


FILE_SIZE_LIMIT = 4096
"""RLIMIT_FSIZE for the faulty run: a lease file fits, one WAL frame (a 4 KiB page plus its
header) does not, so the first commit of the resume fails with a real disk I/O error (EFBIG;
Python ignores SIGXFSZ). It applies to root too, unlike a read-only chmod."""


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


def _faulty_resume(home: Path) -> tuple[str, int | None, str]:
    """Resume with writes failing, send a first message; return (id, exit status, output).

    This process keeps state.db open meanwhile, so its -shm file stays allocated and the child's
    reads need no file growth (a fresh -shm is 32 KiB, above the limit).
    """
    sid = new_session(home)
    keeper = apsw.Connection(str(home / "state.db"))
    try:
        keeper.execute("SELECT count(*) FROM sessions").fetchall()
        child = spawn(home, "-r", sid, preexec=_limit_file_size)
        child.expect_exact(PROMPT)
        assert f"Recap of {sid}" in str(child.before)  # the read side works under the limit
        child.sendline("first message")
        status, out = finish(child)
    finally:
        keeper.close()
    return sid, status, out


def test_failed_resume_record_ends_run_before_the_first_message(tmp_path: Path) -> None:
    """A resume whose recording fails exits 1 at the first input and never sends that message."""
    sid, status, out = _faulty_resume(tmp_path)
    assert status == 1, out
    assert 'you said "first message"' not in out
    assert user_messages(tmp_path, sid) == ["hello"]
    assert RESUMED not in history(tmp_path, sid)


def test_failed_resume_record_is_reported_as_an_error_line(tmp_path: Path) -> None:
    """A resume whose recording fails reports `Error: …` (no traceback) when joined."""
    _, status, out = _faulty_resume(tmp_path)
    assert status == 1, out
    assert "Error: " in out and "Traceback" not in out, out
