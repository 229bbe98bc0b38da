"""The embedded one-shot (``hermes -q``) against a local OpenAI-compatible server: the reply is
drawn as it streams, once, and a piped run prints exactly the reply."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pexpect

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.openai_server import fake_model
except ModuleNotFoundError:  # pragma: no cover
    from openai_server import fake_model  # type: ignore[no-redef,import-not-found]

ENTRY = "from hermes_es.cli import main; main()"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_", "OPENAI"))}
    env.update({"HERMES_HOME": str(home), "COLUMNS": "200", "NO_COLOR": "1"})
    return env


def test_embedded_oneshot_streams_and_pipes_the_same_reply(tmp_path: Path) -> None:
    """On a terminal the pieces show before the turn ends (each once); piped, stdout is the
    reply and one newline, as before streaming."""
    with fake_model(slow_delay=0.4) as server:
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.yaml").write_text(
            f"model:\n  provider: openai\n  base_url: {server.base_url}\n  name: test-model\n"
        )
        child = pexpect.spawn(
            sys.executable,
            ["-c", ENTRY, "-q", "slow 6"],
            env=_env(home),
            cwd=str(home),
            encoding="utf-8",
            timeout=30,
            dimensions=(50, 200),
        )
        child.expect_exact("piece1")
        early = str(child.before)
        assert child.isalive() and "piece5" not in early
        child.expect(pexpect.EOF)
        out = early + "piece1" + str(child.before)
        child.close()
        assert child.exitstatus == 0
        assert out.count("piece0") == 1 and out.count("piece5") == 1
        piped = subprocess.run(
            [sys.executable, "-c", ENTRY, "-q", "hello there"],
            env=_env(home),
            cwd=home,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == "echo: hello there\n"
