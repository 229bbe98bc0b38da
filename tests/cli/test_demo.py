"""``make demo`` (the README's quick start) runs to the end and its gateway part shows what the
gateway does: a background gateway, a second client sharing the session's live stream, the
turn attributed in the history, optimize refusing beside it, and the stop."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_the_demo_runs_and_shows_the_gateway() -> None:
    """The demo exits 0; its gateway section has each of its steps in order."""
    env = {k: v for k, v in os.environ.items() if k not in ("HERMES_HOME", "HERMES_NO_GATEWAY")}
    ran = subprocess.run(
        [sys.executable, "-m", "hermes_es.demo"],
        env={**env, "NO_COLOR": "1"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    out = ran.stdout.split("▶ the gateway", 1)[1]
    steps = [
        "$ hermes gateway start",
        "gateway started: pid ",
        "gateway running: pid ",
        "a second client (a WebSocket, kind tui) attached to the same session saw:",
        "hermes.turn.admitted  by uid:",
        "turn.stream     reply.delta (live, not stored)",
        "hermes.turn.finished  by gateway",
        "turn 1 admitted from cli: Summarize where we are, through the gateway",
        "optimize refused: state.db is held by pid",
        "gateway stopped (pid ",
    ]
    at = 0
    for step in steps:
        found = out.find(step, at)
        assert found >= 0, f"{step!r} missing after position {at}:\n{out}"
        at = found
    assert "Traceback" not in ran.stdout + ran.stderr
