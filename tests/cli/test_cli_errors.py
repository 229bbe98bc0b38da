"""Environmental failures (a damaged store, an unusable path) are `Error:` lines, exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ENTRY = "from hermes_es.cli import main; main()"


def hermes(home: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run hermes with HERMES_HOME set, stdin not a terminal."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(home), HERMES_RESPONDER="offline")
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_file_that_is_not_a_database_is_reported_not_traced(tmp_path: Path) -> None:
    """Every command on a state.db that is not SQLite says so and exits 1, no traceback."""
    (tmp_path / "state.db").write_text("not a database at all, just text\n" * 100)
    for args in (["sessions", "list"], ["chat", "-q", "hi"], ["sessions", "verify"]):
        done = hermes(tmp_path, *args)
        assert done.returncode == 1, (args, done.stderr)
        assert "Error:" in done.stderr and "not a database" in done.stderr, args
        assert "Traceback" not in done.stderr, args


def test_an_unusable_output_path_is_reported_not_traced(tmp_path: Path) -> None:
    """An export into a directory that cannot be created names it, exit 1, no traceback."""
    assert hermes(tmp_path, "chat", "-q", "hello", "--source", "cli").returncode == 0
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory should go")
    done = hermes(tmp_path, "sessions", "export", str(blocker / "out"), "--source", "cli")
    assert done.returncode == 1
    assert "Error:" in done.stderr and "Traceback" not in done.stderr
    assert str(blocker) in done.stderr
