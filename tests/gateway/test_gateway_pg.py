"""The gateway as a real subprocess on a PostgreSQL store: turns, reads by the CLI, recovery."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hermes_es.gateway.client import GatewayHandle
from tests.gateway.conftest import GatewayProcess, SlowModel, model_config, write_config


def _hermes(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from hermes_es.cli import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _events(handle: GatewayHandle, sid: str) -> list[dict[str, Any]]:
    with handle.connect() as conn:
        result = conn.call("events.since", {"session_id": sid, "last_sequence": 0})
    events: list[dict[str, Any]] = result["events"]
    return events


def test_gateway_on_postgres_turn_readable_and_kill9_unknown(
    home: Path, gw_env: dict[str, str], slow_model: SlowModel, pg_url: str
) -> None:
    """With --store URL the gateway writes to PostgreSQL (no state.db appears); the completed turn
    is read back by `hermes --store URL sessions show`; after SIGKILL mid-turn a restart resolved
    through $HERMES_STORE_URL records that turn as unknown."""
    write_config(home, model_config(slow_model))
    gateway = GatewayProcess(home, gw_env, ("--store", pg_url))
    handle = gateway.start()
    try:
        assert (home / "gateway.json").exists() and (home / "gateway.sock").exists()
        with handle.connect() as conn:
            sid = conn.call("session.create", {"title": "on pg"})["session_id"]
            done = conn.call(
                "prompt.submit", {"session_id": sid, "submission_id": "s1", "text": "hello pg"}
            )
            final = conn.wait_turn(sid, done["turn"], timeout=30)
            assert final["event"]["outcome"] == "completed"
            conn.call(
                "prompt.submit", {"session_id": sid, "submission_id": "s2", "text": "SLOW one"}
            )
            assert slow_model.arrived.wait(30)
        assert not (home / "state.db").exists()  # the store is the database, not a file
        shown = _hermes(gw_env, "--store", pg_url, "sessions", "show", sid, "--json")
        assert shown.returncode == 0, shown.stderr
        texts = [m["content"] for m in json.loads(shown.stdout)["messages"]]
        assert texts[:2] == ["hello pg", "echo: hello pg"]
    finally:
        gateway.kill9()
    restarted = GatewayProcess(home, {**gw_env, "HERMES_STORE_URL": pg_url})
    handle = restarted.start()
    try:
        assert handle.endpoint.epoch == 2
        unknown = [e for e in _events(handle, sid) if e["type"] == "hermes.turn.unknown"]
        assert [e["event"]["turn"] for e in unknown] == [2]
        assert slow_model.count("SLOW one") == 1  # never replayed
        listed = _hermes(gw_env, "--store", pg_url, "sessions", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert {s["id"]: s["turn_state"] for s in json.loads(listed.stdout)}[sid] == "unknown"
        assert not (home / "state.db").exists()
    finally:
        assert restarted.terminate() == 0


def test_gateway_unreachable_store_exits_1_naming_it(home: Path, gw_env: dict[str, str]) -> None:
    """A store URL nothing answers at: `gateway run` exits 1 naming the store (password hidden),
    without a traceback, and publishes no endpoint."""
    url = "postgresql://who:secret@127.0.0.1:9/none"
    ran = _hermes(gw_env, "gateway", "run", "--store", url)
    assert ran.returncode == 1, ran.stderr
    assert "postgresql://who:***@127.0.0.1:9/none" in ran.stderr
    assert "secret" not in ran.stderr + ran.stdout
    assert "Traceback" not in ran.stderr
    assert not (home / "gateway.json").exists()


def test_gateway_start_store_option_reaches_background_gateway(
    home: Path, gw_env: dict[str, str], pg_url: str
) -> None:
    """`gateway start --store URL` runs the background gateway on that database (the URL passed
    in its environment, not on its command line); `ensure` finds it; `stop` ends it."""
    started = _hermes(gw_env, "gateway", "start", "--store", pg_url, "--json")
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    try:
        assert info["started"] is True
        cmdline = Path(f"/proc/{info['pid']}/cmdline").read_bytes().decode()
        assert pg_url not in cmdline
        ensured = _hermes(gw_env, "gateway", "ensure", "--json")
        assert json.loads(ensured.stdout)["pid"] == info["pid"]
        from hermes_es.gateway.client import running_gateway

        handle = running_gateway(home)
        assert handle is not None
        with handle.connect() as conn:
            sid = conn.call("session.create", {"title": "started on pg"})["session_id"]
        listed = _hermes(gw_env, "--store", pg_url, "sessions", "list", "--json")
        assert sid in [s["id"] for s in json.loads(listed.stdout)]
        assert not (home / "state.db").exists()
    finally:
        stopped = _hermes(gw_env, "gateway", "stop")
    assert stopped.returncode == 0 and "gateway stopped" in stopped.stdout, stopped.stderr
