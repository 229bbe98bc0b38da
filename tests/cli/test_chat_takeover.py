"""Taking over a live chat's session: the chat that held it learns it and turns read-only.

Real processes: the chat that gets taken over runs under a pseudo-terminal (pexpect); the
taking-over process is a second ``hermes -r ID --take-over -q …`` subprocess.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pexpect
import pytest

from hermes_es.commands.holders import (
    SessionTakenOverError,
    check_taken_over,
    live_holders,
    register_holder,
)
from hermes_es.commands.resume import WRITER_KIND, live_writers, take_over
from hermes_es.projections.catalog import connect

ENTRY = "from hermes_es.cli import main; main()"
PROMPT = "hermes> "


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    env.update({"HERMES_HOME": str(home), "COLUMNS": "200", "NO_COLOR": "1"})
    return env


def spawn(home: Path, *args: str) -> pexpect.spawn:
    """Start an interactive hermes on a pseudo-terminal."""
    return pexpect.spawn(
        sys.executable,
        ["-c", ENTRY, *args],
        env=_env(home),
        cwd=str(home),
        encoding="utf-8",
        timeout=30,
        dimensions=(50, 200),
    )


def take_over_run(home: Path, sid: str, text: str) -> tuple[int, subprocess.CompletedProcess[str]]:
    """Run ``hermes -r SID --take-over -q TEXT`` as a second process; returns (pid, result)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "-r", sid, "--take-over", "-q", text],
        env=_env(home),
        cwd=home,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, errs = proc.communicate(timeout=60)
    return proc.pid, subprocess.CompletedProcess(proc.args, proc.returncode, out, errs)


def rows(home: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """Read the store directly."""
    conn = connect(home / "state.db")
    try:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def texts(home: Path, sid: str, role: str) -> list[str]:
    """The texts of one role in a session, in order."""
    return [
        str(r[0])
        for r in rows(
            home,
            "SELECT content FROM messages WHERE session_id=? AND role=? ORDER BY seq",
            sid,
            role,
        )
    ]


def say(child: pexpect.spawn, line: str) -> str:
    """Send a line and return what was printed before the next prompt."""
    child.sendline(line)
    child.expect_exact(PROMPT)
    return str(child.before)


def start_chat(home: Path) -> tuple[pexpect.spawn, str]:
    """An interactive chat on a new session that has sent one message; returns (child, id)."""
    child = spawn(home)
    child.expect(r"Session (\S+)\. /help")
    sid = str(child.match.group(1))
    child.expect_exact(PROMPT)
    say(child, "first from the terminal")
    return child, sid


def one_line(text: str) -> str:
    """Terminal output with the pty's line wrapping and carriage returns removed."""
    return re.sub(r"\s+", " ", text.replace("\r", ""))


def test_taken_over_chat_turns_read_only_and_records_nothing(tmp_path: Path) -> None:
    """After another process takes over, the old chat's next send is refused and not recorded."""
    child, sid = start_chat(tmp_path)
    try:
        pid, taken = take_over_run(tmp_path, sid, "taken over here")
        assert taken.returncode == 0, taken.stderr
        assert f"took over session {sid} from pid {child.pid}" in taken.stderr
        shown = one_line(say(child, "second from the terminal"))
        assert (
            f"this session was taken over by pid {pid} (hermes -r {sid} --take-over); "
            "your message was not sent — /new or /resume to continue elsewhere"
        ) in shown
        assert "changed by another writer" not in shown
        again = one_line(say(child, "third from the terminal"))
        assert f"taken over by pid {pid}" in again and "your message was not sent" in again
        titled = one_line(say(child, "/title mine now"))
        assert "/title was not applied" in titled
        assert texts(tmp_path, sid, "user") == ["first from the terminal", "taken over here"]
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    # The one-shot taker ended its run; the old chat's exit recorded no end of its own.
    assert rows(tmp_path, "SELECT title, end_reason FROM sessions WHERE id=?", sid) == [
        ("", "run_complete")
    ]


def test_taken_over_chat_can_continue_in_a_new_session(tmp_path: Path) -> None:
    """/new after a take-over starts a writable session; the taken-over one is left alone."""
    child, sid = start_chat(tmp_path)
    try:
        _, taken = take_over_run(tmp_path, sid, "mine now")
        assert taken.returncode == 0, taken.stderr
        assert "your message was not sent" in one_line(say(child, "lost?"))
        child.sendline("/new elsewhere")
        child.expect(r"New session (\S+) ")
        fresh = str(child.match.group(1))
        child.expect_exact(PROMPT)
        say(child, "continuing here")
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert fresh != sid
    assert texts(tmp_path, fresh, "user") == ["continuing here"]
    assert texts(tmp_path, sid, "user") == ["first from the terminal", "mine now"]


def test_resume_after_take_over_sees_no_stale_writer(tmp_path: Path) -> None:
    """A chat that was taken over no longer counts as the session's live writer."""
    child, sid = start_chat(tmp_path)
    try:
        _, taken = take_over_run(tmp_path, sid, "taken")
        assert taken.returncode == 0, taken.stderr
        assert live_writers(tmp_path / "state.db", sid) == []
        say(child, "noticed?")  # the old chat re-registers as a viewer
        kinds = [(h.pid, h.kind) for h in live_holders(tmp_path / "state.db")]
        assert kinds == [(child.pid, "chat-viewer")]
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_interactive_take_over_choice_stops_the_first_chat(tmp_path: Path) -> None:
    """Choosing [t]ake over at the second chat's prompt turns the first chat read-only."""
    first, sid = start_chat(tmp_path)
    second = spawn(tmp_path, "-r", sid)
    try:
        second.expect_exact("[t]ake over")
        second.sendline("t")
        second.expect_exact(PROMPT)
        assert f"took over session {sid} from pid {first.pid}" in one_line(str(second.before))
        say(second, "from the second chat")
        shown = one_line(say(first, "from the first chat"))
        assert f"taken over by pid {second.pid} (hermes -r {sid} --take-over)" in shown
        assert texts(tmp_path, sid, "user") == ["first from the terminal", "from the second chat"]
        for child in (first, second):
            child.sendline("/exit")
            child.expect(pexpect.EOF)
    finally:
        first.close(force=True)
        second.close(force=True)
    assert rows(tmp_path, "SELECT end_reason FROM sessions WHERE id=?", sid) == [("user_exit",)]


# --- a take-over while the old chat's responder is still answering ----------------------------


class SlowEndpoint:
    """A chat-completions server that holds one reply back until the test releases it."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.release = threading.Event()


def _completion(text: str) -> bytes:
    return msgspec.json.encode(
        {
            "model": "test-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2},
        }
    )


@pytest.fixture()
def slow_endpoint(tmp_path: Path) -> Iterator[SlowEndpoint]:
    """A local endpoint (config.yaml points at it): a message saying 'slow' waits for release."""
    plan = SlowEndpoint()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            reply = b"quick reply"
            if b"slow please" in body and not plan.arrived.is_set():
                plan.arrived.set()
                plan.release.wait(30)
                reply = b"late reply"
            payload = _completion(reply.decode())
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    (tmp_path / "config.yaml").write_text(
        f"model:\n  provider: openai\n  base_url: {url}\n  name: test-model\n  timeout: 30\n"
    )
    try:
        yield plan
    finally:
        plan.release.set()
        server.shutdown()
        server.server_close()


def test_take_over_mid_turn_shows_the_reply_but_does_not_record_it(
    tmp_path: Path, slow_endpoint: SlowEndpoint
) -> None:
    """A reply that arrives after the take-over is printed, marked unrecorded, and not stored."""
    child, sid = start_chat(tmp_path)
    try:
        child.sendline("slow please")
        assert slow_endpoint.arrived.wait(30)
        pid, taken = take_over_run(tmp_path, sid, "taken meanwhile")
        assert taken.returncode == 0, taken.stderr
        slow_endpoint.release.set()
        child.expect_exact(PROMPT)
        shown = one_line(str(child.before))
        assert "late reply" in shown
        assert f"taken over by pid {pid}" in shown and "the reply above was not recorded" in shown
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert texts(tmp_path, sid, "user") == [
        "first from the terminal",
        "slow please",
        "taken meanwhile",
    ]
    assert texts(tmp_path, sid, "assistant") == ["quick reply", "quick reply"]


# --- the registry mechanism and the flags -----------------------------------------------------

HOLD = """
import sys
from hermes_es.commands.holders import register_holder, check_taken_over
with register_holder(sys.argv[1], "chat", sys.argv[2]) as me:
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        check_taken_over(me)
    except Exception as exc:
        print(f"taken: {exc}", flush=True)
    else:
        print("still mine", flush=True)
"""


def test_take_over_marks_the_holders_lease_in_another_process(tmp_path: Path) -> None:
    """take_over marks a live writer's lease; that process reads the mark before writing."""
    db = tmp_path / "state.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db), "s1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert take_over(db, "other-session") == []
        assert take_over(db, "s1") == [f"pid {proc.pid} (chat, session s1)"]
        proc.stdin.write("\n")
        proc.stdin.flush()
        answer = proc.stdout.readline().strip()
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert (
        answer
        == f"taken: this session was taken over by pid {os.getpid()} (hermes -r s1 --take-over)"
    )


def test_an_unmarked_lease_is_not_taken_over(tmp_path: Path) -> None:
    """A chat nobody took over passes the check; its own lease is never marked by itself."""
    db = tmp_path / "state.db"
    with register_holder(db, WRITER_KIND, "s1") as me:
        check_taken_over(me)
        assert take_over(db, "s1") == []  # this process's own lease is not another chat
        check_taken_over(me)


def test_a_marked_lease_raises_with_the_taker(tmp_path: Path) -> None:
    """A lease another process marked raises SessionTakenOverError naming that pid."""
    db = tmp_path / "state.db"
    code = (
        "import os, sys; from hermes_es.commands.resume import take_over;"
        " print(os.getpid(), take_over(sys.argv[1], 's1'))"
    )
    with register_holder(db, WRITER_KIND, "s1") as me:
        done = subprocess.run(
            [sys.executable, "-c", code, str(db)], capture_output=True, text=True, timeout=60
        )
        taker = int(done.stdout.split()[0])
        assert f"pid {os.getpid()} (chat, session s1)" in done.stdout
        with pytest.raises(SessionTakenOverError, match=rf"taken over by pid {taker} ") as info:
            check_taken_over(me)
    assert info.value.pid == taker and info.value.session_id == "s1"


@pytest.mark.parametrize(
    "args",
    [
        ("--take-over", "--fork", "-q", "hello"),
        ("--fork", "--read-only", "-q", "hello"),
        ("--take-over", "--read-only"),
    ],
    ids=["take-over+fork", "fork+read-only", "take-over+read-only"],
)
def test_conflicting_flags_are_a_usage_error_even_for_a_new_session(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Two of --take-over/--fork/--read-only exit 2 before any session is started."""
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        env=_env(tmp_path),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "choose one of --take-over, --fork, --read-only" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "state.db").exists() or rows(
        tmp_path, "SELECT COUNT(*) FROM sessions"
    ) == [(0,)]
