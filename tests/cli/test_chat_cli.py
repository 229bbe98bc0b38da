"""``hermes`` chat runs as real subprocesses: sources, resume rules, cwd, conflicts, endpoints."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hermes_es.commands.holders import register_holder
from hermes_es.projections.catalog import connect

ENTRY = "from hermes_es.cli import main; main()"


def hermes(
    home: Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run hermes with its own HERMES_HOME, stdin not a terminal."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    full.update({"HERMES_HOME": str(home), **(env or {})})
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        cwd=cwd or home,
        env=full,
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


def users(home: Path, sid: str) -> list[str]:
    """User message texts of a session."""
    return [
        r[0]
        for r in rows(
            home,
            "SELECT content FROM messages WHERE session_id=? AND role='user' ORDER BY seq",
            sid,
        )
    ]


def only_session(home: Path) -> str:
    """The id of the newest session."""
    return str(rows(home, "SELECT id FROM sessions ORDER BY started_at DESC, id DESC")[0][0])


def test_q_without_tty_is_oneshot_and_prints_reply(tmp_path: Path) -> None:
    """-q on non-TTY stdio prints the reply and records a oneshot session with a 6-hex id."""
    done = hermes(tmp_path, "chat", "-q", "hello world")
    assert done.returncode == 0, done.stderr
    assert 'you said "hello world"' in done.stdout
    sid = only_session(tmp_path)
    assert rows(tmp_path, "SELECT source FROM sessions WHERE id=?", sid) == [("oneshot",)]
    assert len(sid.split("_")[2]) == 6 and f"hermes --resume {sid}" in done.stderr


def test_source_flag_wins_and_z_is_quiet(tmp_path: Path) -> None:
    """--source TAG always wins; -z prints only the reply."""
    done = hermes(tmp_path, "-z", "hi", "--source", "kanban")
    assert done.returncode == 0 and done.stdout.startswith("Offline reply") and not done.stderr
    assert rows(tmp_path, "SELECT source FROM sessions") == [("kanban",)]


def test_continue_picks_last_oneshot(tmp_path: Path) -> None:
    """hermes -c continues the last one-shot run (CLI history includes oneshot)."""
    hermes(tmp_path, "-q", "first")
    sid = only_session(tmp_path)
    done = hermes(tmp_path, "-c", "-q", "second")
    assert done.returncode == 0, done.stderr
    assert users(tmp_path, sid) == ["first", "second"]


def test_two_fake_terminals_resume_their_own(tmp_path: Path) -> None:
    """Per-terminal breadcrumbs: each tmux pane's bare -c resumes its own session."""
    one, two = {"TMUX_PANE": "%1"}, {"TMUX_PANE": "%2"}
    hermes(tmp_path, "-q", "pane one", env=one)
    first = only_session(tmp_path)
    time.sleep(1.1)
    hermes(tmp_path, "-q", "pane two", env=two)
    second = only_session(tmp_path)
    assert first != second
    assert hermes(tmp_path, "-c", "-q", "back in one", env=one).returncode == 0
    assert hermes(tmp_path, "-c", "-q", "back in two", env=two).returncode == 0
    assert users(tmp_path, first) == ["pane one", "back in one"]
    assert users(tmp_path, second) == ["pane two", "back in two"]


def test_new_name_from_shell_sets_title(tmp_path: Path) -> None:
    """hermes /new NAME creates a session titled NAME; -c NAME resumes it."""
    done = hermes(tmp_path, "/new", "payments-refactor")
    assert done.returncode == 0, done.stderr
    sid = only_session(tmp_path)
    assert rows(tmp_path, "SELECT title FROM sessions WHERE id=?", sid) == [("payments-refactor",)]
    assert hermes(tmp_path, "-c", "payments-refactor", "-q", "go").returncode == 0
    assert users(tmp_path, sid) == ["go"]


def test_unknown_name_exits_1_with_list_hint(tmp_path: Path) -> None:
    """An unknown -c name exits 1 and says how to list sessions."""
    hermes(tmp_path, "-q", "x")
    done = hermes(tmp_path, "-c", "no such thing", "-q", "y")
    assert done.returncode == 1 and "hermes sessions list" in done.stderr


def test_resume_restores_cwd_and_survives_its_failure(tmp_path: Path) -> None:
    """Resume cds into the session dir (a relative path resolves there); a removed dir is noted."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "here.txt").write_text("banana\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    hermes(tmp_path, "-q", "start", cwd=work)
    sid = only_session(tmp_path)
    done = hermes(tmp_path, "-r", sid, "-q", "read here.txt", cwd=elsewhere)
    assert f"↪ restored workspace dir: {work}" in done.stderr and "📎 document" in done.stderr
    stay = hermes(tmp_path, "-r", sid, "--no-restore-cwd", "-q", "read here.txt", cwd=elsewhere)
    assert "restored" not in stay.stderr and "📎" not in stay.stderr
    shutil.rmtree(work)
    gone = hermes(tmp_path, "-r", sid, "-q", "still here?", cwd=elsewhere)
    assert gone.returncode == 0 and "could not restore workspace dir" in gone.stderr
    assert users(tmp_path, sid)[-1] == "still here?"


def test_in_dir_picks_that_workspace_and_pins(tmp_path: Path) -> None:
    """--in DIR -c resumes DIR's latest session, not the globally latest one."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    hermes(tmp_path, "-q", "in a", cwd=a)
    sid_a = only_session(tmp_path)
    time.sleep(1.1)
    hermes(tmp_path, "-q", "in b", cwd=b)
    done = hermes(tmp_path, "--in", str(a), "-c", "-q", "again a", cwd=b)
    assert done.returncode == 0, done.stderr
    assert users(tmp_path, sid_a) == ["in a", "again a"]
    assert "restored" not in done.stderr


def test_held_session_needs_a_choice_when_not_interactive(tmp_path: Path) -> None:
    """Resuming a session another live chat holds: error by default; fork/read-only/take-over."""
    hermes(tmp_path, "-q", "mine")
    sid = only_session(tmp_path)
    with register_holder(tmp_path / "state.db", "chat", sid):
        refused = hermes(tmp_path, "-r", sid, "-q", "hello")
        assert refused.returncode == 1 and "--take-over" in refused.stderr
        ro = hermes(tmp_path, "-r", sid, "--read-only", "-q", "hello")
        assert ro.returncode != 0 and "read-only" in ro.stderr
        fork = hermes(tmp_path, "-r", sid, "--fork", "-q", "on a branch")
        assert fork.returncode == 0, fork.stderr
        taken = hermes(tmp_path, "-r", sid, "--take-over", "-q", "taken")
        assert taken.returncode == 0, taken.stderr
    branch = rows(tmp_path, "SELECT id FROM sessions WHERE parent_kind='branch'")[0][0]
    assert users(tmp_path, sid) == ["mine", "taken"]
    assert users(tmp_path, branch) == ["mine", "on a branch"]


def test_sessions_subcommands_still_work(tmp_path: Path) -> None:
    """hermes sessions show still runs alongside the root chat options."""
    hermes(tmp_path, "-q", "visible")
    done = hermes(tmp_path, "sessions", "show", only_session(tmp_path))
    assert done.returncode == 0 and "visible" in done.stdout


# --- OpenAI-compatible endpoint -------------------------------------------------------------


class Plan:
    """What the fake endpoint answers next."""

    status = 200
    body = b""
    delay = 0.0


def _server(plan: type[Plan]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            time.sleep(plan.delay)
            try:
                self.send_response(plan.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(plan.body)))
                self.end_headers()
                self.wfile.write(plan.body)
            except OSError:
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def endpoint(tmp_path: Path) -> Iterator[type[Plan]]:
    """A local chat-completions server and a config.yaml pointing at it."""

    class Local(Plan):
        pass

    for url in _server(Local):
        (tmp_path / "config.yaml").write_text(
            f"model:\n  provider: openai\n  base_url: {url}\n  name: test-model\n  timeout: 1\n"
        )
        yield Local


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
            "usage": {"prompt_tokens": 7, "completion_tokens": 3},
        }
    )


def test_openai_endpoint_success(tmp_path: Path, endpoint: type[Plan]) -> None:
    """A working endpoint's reply is printed and stored with its token usage."""
    endpoint.body = _completion("hello from the endpoint")
    done = hermes(tmp_path, "-q", "hi model")
    assert done.returncode == 0, done.stderr
    assert "hello from the endpoint" in done.stdout
    sid = only_session(tmp_path)
    assert rows(
        tmp_path, "SELECT role, tokens_in FROM messages WHERE session_id=? ORDER BY seq", sid
    ) == [("user", 0), ("assistant", 7)]


@pytest.mark.parametrize(
    ("status", "body", "delay", "needle"),
    [
        (500, b'{"error": {"message": "boom"}}', 0.0, "HTTP 500"),
        (200, b"{not json", 0.0, "malformed"),
        (200, b"", 2.5, "timed out"),
    ],
    ids=["http-500", "malformed-json", "timeout"],
)
def test_openai_endpoint_failure_keeps_user_message(
    tmp_path: Path, endpoint: type[Plan], status: int, body: bytes, delay: float, needle: str
) -> None:
    """A failing endpoint: clear error on stderr, exit 1, the user's message kept in the store."""
    endpoint.status, endpoint.body, endpoint.delay = status, body, delay
    done = hermes(tmp_path, "-q", "please answer")
    assert done.returncode == 1
    assert "Error:" in done.stderr and needle in done.stderr and "Traceback" not in done.stderr
    assert users(tmp_path, only_session(tmp_path)) == ["please answer"]
