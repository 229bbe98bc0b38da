"""The terminal chat against a local OpenAI-compatible server: streamed replies, Ctrl-C, tools."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pexpect

from hermes_es.projections.catalog import connect
from tests.terminal_signals import default_terminal_signals

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.openai_server import FakeModel, fake_model
except ModuleNotFoundError:  # pragma: no cover
    from openai_server import FakeModel, fake_model  # type: ignore[no-redef,import-not-found]

ENTRY = "from hermes_es.cli import main; main()"
PROMPT = "hermes> "


def _home(tmp_path: Path, server: FakeModel) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(
        f"model:\n  provider: openai\n  base_url: {server.base_url}\n  name: test-model\n"
    )
    (home / "00-first.txt").write_text("first")
    return home


def _spawn(home: Path, *args: str) -> pexpect.spawn:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_", "OPENAI"))}
    env.update({"HERMES_HOME": str(home), "COLUMNS": "200", "NO_COLOR": "1"})
    return pexpect.spawn(
        sys.executable,
        ["-c", ENTRY, *args],
        env=env,
        cwd=str(home),
        encoding="utf-8",
        timeout=30,
        dimensions=(50, 200),
        preexec_fn=default_terminal_signals,
    )


def test_ctrl_c_keeps_the_streamed_part_marked_interrupted(tmp_path: Path) -> None:
    """Pieces show as they stream; Ctrl-C stops the reply, keeps what arrived, chat goes on."""
    with fake_model(slow_delay=0.4) as server:
        home = _home(tmp_path, server)
        child = _spawn(home)
        child.expect_exact(PROMPT)
        child.sendline("slow 20")
        child.expect_exact("piece1")  # drawn before the reply is complete
        child.sendintr()
        child.expect_exact("(interrupted; what arrived is kept")
        child.expect_exact(PROMPT)
        child.sendline("hello again")
        child.expect_exact("echo: hello again")
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    conn = connect(home / "state.db")
    try:
        rows = conn.execute(
            "SELECT role, content, finish_reason FROM messages ORDER BY session_id, ord"
        ).fetchall()
    finally:
        conn.close()
    assert [r[0] for r in rows] == ["user", "assistant", "user", "assistant"]
    partial = rows[1]
    assert partial[1].startswith("piece0 piece1") and "piece19" not in partial[1]
    assert partial[2] == "interrupted"
    assert rows[3][1:] == ("echo: hello again", "stop")


def test_tool_calls_are_shown_and_run_in_the_terminal(tmp_path: Path) -> None:
    """A tool turn draws the call and its result, then the streamed reply."""
    with fake_model() as server:
        home = _home(tmp_path, server)
        child = _spawn(home)
        child.expect_exact(PROMPT)
        child.sendline("list .")
        child.expect_exact('⚙ list_directory {"path": "."}')
        child.expect_exact("→ 00-first.txt  5")  # the first entry of the listing, with its size
        child.expect_exact("Tool said: 00-first.txt  5")
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
