"""``/discard`` in an interactive ``hermes`` through a restarted gateway: a session paused on
the turn a SIGKILL interrupted is resumed on a pty, the chat says the turn is unknown and how
to resolve it, ``/discard`` resolves it, and the queued follower runs and is drawn."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pexpect

from hermes_es.commands.engine import SessionEngine
from tests.gateway.conftest import GatewayProcess, SlowModel, model_config, write_config

ENTRY = "from hermes_es.cli import main; main()"
PROMPT = "› "


def test_discard_in_the_chat_resolves_the_unknown_turn_and_the_follower_runs(
    home: Path, gateway: GatewayProcess, gw_env: dict[str, str], slow_model: SlowModel
) -> None:
    """After kill -9 mid-turn and a restart, ``hermes -r ID`` shows the unknown turn,
    ``/discard`` resolves it through the gateway and the follower queued behind it runs once;
    the interrupted prompt is never sent again; the chat's prompt comes back after the follower's
    reply."""
    write_config(home, model_config(slow_model))
    handle = gateway.start()
    with handle.connect() as conn:
        sid = conn.call("session.create", {"title": "paused"})["session_id"]
        for sub, text in (("a1", "SLOW interrupted"), ("a2", "the follower")):
            conn.call("prompt.submit", {"session_id": sid, "submission_id": sub, "text": text})
        assert slow_model.arrived.wait(30)
    gateway.kill9()
    gateway.start()
    seen = io.StringIO()
    chat = pexpect.spawn(
        sys.executable,
        ["-c", ENTRY, "-r", sid],
        env={**gw_env, "NO_COLOR": "1"},
        cwd=str(home),
        encoding="utf-8",
        timeout=40,
        dimensions=(50, 200),
    )
    chat.logfile_read = seen
    chat.expect_exact(PROMPT)
    said = seen.getvalue()
    assert "turn 1 of this session is unknown" in said and "/discard" in said
    chat.sendline("/discard")
    chat.expect_exact("turn 1 discarded; queued messages run now")
    chat.expect_exact("echo: the follower")
    chat.expect_exact(PROMPT)  # drawn again once the follower's turn ended
    chat.sendline("/exit")
    chat.expect(pexpect.EOF)
    assert slow_model.count("SLOW interrupted") == 1  # never replayed
    assert slow_model.count("the follower") == 1
    assert gateway.terminate() == 0
    with SessionEngine(home / "state.db") as engine:
        state = engine.get(sid)
        assert state.turn_state == "" and state.turns_unknown == []
