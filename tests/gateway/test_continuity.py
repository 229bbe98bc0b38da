"""Session continuity through a gateway process: no reset after inactivity whatever legacy
reset settings say, a gateway restart is not a boundary, every start records its epoch, and
a client that closed mid-turn finds the turn stored and replays what it missed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from hermes_es.commands.engine import SessionEngine
from hermes_es.store.decoding import decode_row
from tests.gateway.conftest import (
    GatewayProcess,
    SlowModel,
    hermes,
    model_config,
    write_config,
)


def _ids(home: Path) -> list[str]:
    with SessionEngine(home / "state.db") as engine:
        rows = engine.store.connection().execute("SELECT id FROM sessions").fetchall()
    return [str(r[0]) for r in rows]


def test_no_reset_after_inactivity_or_a_restart_whatever_legacy_settings_say(
    home: Path, gw_env: dict[str, str]
) -> None:
    """With ``session_reset: {mode: both, idle_minutes: 1, at_hour: 4}`` and a reset variable
    set, a CLI session idle for two days continues on its id through the gateway (the start
    warns about both settings), and again after the gateway restarted; every start records
    its epoch on the profile's gateway stream with the instance and pid it published."""
    write_config(home, "session_reset:\n  mode: both\n  idle_minutes: 1\n  at_hour: 4\n")
    env = {**gw_env, "HERMES_SESSION_RESET_MODE": "idle"}
    two_days_ago = time.time() - 2 * 86400
    with SessionEngine(home / "state.db", clock=lambda: two_days_ago) as engine:
        sid = engine.start_session("cli", title="long running", cwd=str(home))
        engine.append_message(sid, "user", "the first thing")
        engine.append_message(sid, "assistant", "noted")
    published = []
    gateway = GatewayProcess(home, env)
    try:
        for text in ("after two days", "after a restart"):
            handle = gateway.start()
            published.append((handle.endpoint.instance_id, handle.endpoint.pid))
            said = hermes(env, "-c", "long running", "-q", text)
            assert said.returncode == 0, said.stderr
            assert f'you said "{text}"' in said.stdout
            assert _ids(home) == [sid]  # the same conversation, never a reset one
            assert gateway.terminate() == 0
    finally:
        if gateway.proc is not None and gateway.proc.poll() is None:
            gateway.proc.kill()
    log = gateway.output()
    assert "session_reset.mode: both" in log
    assert "environment variable HERMES_SESSION_RESET_MODE is set" in log
    with SessionEngine(home / "state.db") as engine:
        assert engine.get(sid).message_count == 6
        rows = engine.store.connection().execute(
            "SELECT originator_version, topic, state FROM events"
            " WHERE originator_id = 'gateway:default' ORDER BY originator_version"
        )
        epochs = [
            (int(v), decode_row(t, s, stream="gateway:default", version=v))
            for v, t, s in rows.fetchall()
        ]
    assert [(v, e.topic, e.epoch) for v, e in epochs] == [
        (1, "hermes.gateway.epoch_began", 1),
        (2, "hermes.gateway.epoch_began", 2),
    ]
    assert [(e.instance_id, e.pid) for _, e in epochs] == published


def test_a_client_closed_mid_turn_finds_it_stored_and_replays_what_it_missed(
    home: Path, gateway: GatewayProcess, slow_model: SlowModel
) -> None:
    """Closing the connection that submitted a turn only detaches it: the turn runs to its
    end and is stored; a new connection asking ``events.since`` from the last sequence the
    first one saw gets exactly the events after it, and the transcript both see is the
    stored one."""
    write_config(home, model_config(slow_model))
    handle = gateway.start()
    first = handle.connect()
    created = first.call("session.create", {})
    sid = created["session_id"]
    first.call("prompt.submit", {"session_id": sid, "submission_id": "m1", "text": "SLOW hold"})
    seen: list[dict[str, Any]] = []
    for message in first.notifications(timeout=2):
        if message.get("method") == "session.event":
            seen.append(message["params"])
    assert slow_model.arrived.wait(30)
    first.close()  # mid-turn
    slow_model.release.set()
    last = seen[-1]["sequence"]
    deadline = time.monotonic() + 30
    with handle.connect() as again:
        while time.monotonic() < deadline:
            missed = again.call("events.since", {"session_id": sid, "last_sequence": last})
            types = [e["type"] for e in missed["events"]]
            if "hermes.turn.finished" in types:
                break
            time.sleep(0.1)
        everything = again.call("events.since", {"session_id": sid, "last_sequence": 0})
    assert [e["sequence"] for e in missed["events"]] == list(
        range(last + 1, last + 1 + len(missed["events"]))
    )
    live = [e for e in everything["events"] if e["sequence"] > created["live_after"]]
    assert seen and live == seen + missed["events"]
    finished = [e for e in missed["events"] if e["type"] == "hermes.turn.finished"]
    assert [e["event"]["outcome"] for e in finished] == ["completed"]
    assert gateway.terminate() == 0
    with SessionEngine(home / "state.db") as engine:
        window = [(m["role"], m["content"]) for m in engine.messages(sid)]
    assert window == [("user", "SLOW hold"), ("assistant", "echo: SLOW hold")]
