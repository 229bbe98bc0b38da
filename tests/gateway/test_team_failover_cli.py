"""The CLI across a team's change of owner: one-shots on a standby host, a one-shot whose owner
dies mid-turn, and a submission sent again to the new owner (admitted once)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

from hermes_es.cli.gateway_chat import UNKNOWN_EXIT, _submit
from hermes_es.gateway.client import Connection
from hermes_es.gateway.failover import connect_owner
from tests.gateway.conftest import GatewayProcess, SlowModel, model_config, write_config
from tests.gateway.test_cli_gateway import ENTRY, hermes
from tests.gateway.test_team_cli import _team_host
from tests.gateway.test_team_gateway import _env, _wait_role


def _plain_host(tmp_path: Path, name: str, model: SlowModel, url: str) -> Path:
    """A host whose config names the store only (no ``gateway.team_homes``)."""
    home = tmp_path / name
    home.mkdir()
    write_config(home, model_config(model, f"store: {{url: '{url}'}}\n"))
    return home


def _stop(*gateways: GatewayProcess) -> None:
    for gateway in gateways:
        if gateway.proc is not None and gateway.proc.poll() is None:
            gateway.proc.kill()
            gateway.proc.wait(10)


def _oneshot(env: dict[str, str], text: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", ENTRY, "-q", text],
        env=env,
        cwd=env["HERMES_HOME"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_oneshot_on_a_standby_host_runs_on_the_owner_and_reports_an_unknown_turn(
    tmp_path: Path, slow_model: SlowModel, pg_url: str
) -> None:
    """Without ``gateway.team_homes``, ``hermes -q`` on the standby's host is admitted by the
    standby and run once by the owner (exit 0, the reply printed); when the owner is SIGKILLed
    while a second one-shot's turn runs, the standby takes over, that turn becomes unknown, and
    the one-shot says so, how to resolve it, and exits 3; resolving it works from that host."""
    home_a = _plain_host(tmp_path, "host-a", slow_model, pg_url)
    home_b = _plain_host(tmp_path, "host-b", slow_model, pg_url)
    env_b = _env(home_b)
    gw_a, gw_b = GatewayProcess(home_a, _env(home_a)), GatewayProcess(home_b, env_b)
    try:
        assert gw_a.start().endpoint.role == "owner"
        assert gw_b.start().endpoint.role == "standby"
        first = hermes(env_b, "-q", "from the standby host")
        assert first.returncode == 0, first.stderr
        assert "echo: from the standby host" in first.stdout
        assert "NOT_OWNER" not in first.stderr and "Traceback" not in first.stderr
        assert slow_model.count("from the standby host") == 1

        running = _oneshot(env_b, "SLOW on the standby host")
        assert slow_model.arrived.wait(30)
        gw_a.kill9()
        _out, errors = running.communicate(timeout=60)
        assert running.returncode == UNKNOWN_EXIT == 3, errors
        sid = _session_from_notice(errors)
        assert f"hermes sessions resolve {sid} --discard" in errors
        assert "is unknown" in errors and "Traceback" not in errors
        assert slow_model.count("SLOW on the standby host") == 1
        resolved = hermes(env_b, "sessions", "resolve", sid, "--discard")
        assert resolved.returncode == 0, resolved.stderr
        assert gw_b.terminate() == 0
    finally:
        _stop(gw_a, gw_b)


def _session_from_notice(stderr: str) -> str:
    marker = "of session "
    assert marker in stderr, stderr
    return stderr.split(marker, 1)[1].split()[0]


def test_team_oneshot_whose_owner_dies_reattaches_and_reports_the_unknown_turn(
    tmp_path: Path, slow_model: SlowModel, pg_url: str
) -> None:
    """With ``gateway.team_homes``, a one-shot attached to the owner whose owner is SIGKILLed
    mid-turn waits for the standby's takeover, re-attaches there (saying so), replays what it
    missed, reports the turn unknown with how to resolve it, and exits 3; the message ran once."""
    home_a = _team_host(tmp_path, "host-a", "host-b", slow_model, pg_url)
    home_b = _team_host(tmp_path, "host-b", "host-a", slow_model, pg_url)
    env_a = _env(home_a)
    gw_a, gw_b = GatewayProcess(home_a, env_a), GatewayProcess(home_b, _env(home_b))
    try:
        assert gw_a.start().endpoint.role == "owner"
        assert gw_b.start().endpoint.role == "standby"
        running = _oneshot(env_a, "SLOW dies with its owner")
        assert slow_model.arrived.wait(30)
        gw_a.kill9()
        _out, errors = running.communicate(timeout=60)
        assert running.returncode == 3, errors
        assert f"now on the gateway of {home_b}" in errors
        sid = _session_from_notice(errors)
        assert f"hermes sessions resolve {sid} --discard" in errors
        assert "Traceback" not in errors
        assert slow_model.count("SLOW dies with its owner") == 1
        assert gw_b.terminate() == 0
    finally:
        _stop(gw_a, gw_b)


def test_a_submission_sent_again_to_the_new_owner_is_admitted_once(
    tmp_path: Path, slow_model: SlowModel, pg_url: str
) -> None:
    """``_submit`` on a connection whose owner was SIGKILLed after admitting the submission
    re-attaches through the team's live owner and sends it again with the same submission id:
    the new owner answers with the same admission (duplicate), so nothing runs twice; a new
    submission id on a dead connection is admitted once on the new owner."""
    home_a = _team_host(tmp_path, "host-a", "host-b", slow_model, pg_url)
    home_b = _team_host(tmp_path, "host-b", "host-a", slow_model, pg_url)
    gw_a, gw_b = GatewayProcess(home_a, _env(home_a)), GatewayProcess(home_b, _env(home_b))
    opened: list[Connection] = []

    def relink() -> Connection | None:
        conn = connect_owner([home_a, home_b], timeout=10)
        opened.append(conn)
        conn.call("session.resume", {"ref": sid})
        return conn

    try:
        handle_a = gw_a.start()
        assert gw_b.start().endpoint.role == "standby"
        conn_a = handle_a.connect()
        opened.append(conn_a)
        sid = conn_a.call("session.create", {"title": "resend"})["session_id"]
        params = {"session_id": sid, "submission_id": "once", "text": "admitted before the kill"}
        first = conn_a.call("prompt.submit", params)
        assert conn_a.wait_turn(sid, first["turn"], timeout=30)["event"]["outcome"] == "completed"
        gw_a.kill9()
        _wait_role(home_b, "owner", 15.0)
        conn, again = _submit(conn_a, params, relink)
        assert conn is not conn_a and again["turn"] == first["turn"] and again["duplicate"]
        fresh = {"session_id": sid, "submission_id": "new", "text": "after the kill"}
        closed = opened[-1]
        closed.close()  # as after a drop: the call fails, the submission goes to the owner
        conn2, admitted = _submit(closed, fresh, relink)
        assert admitted["turn"] == first["turn"] + 1 and not admitted["duplicate"]
        assert conn2.wait_turn(sid, admitted["turn"], timeout=30)["event"]["outcome"] == (
            "completed"
        )
        time.sleep(0.2)
        assert slow_model.count("admitted before the kill") == 1
        assert slow_model.count("after the kill") == 1
    finally:
        for each in opened:
            with contextlib.suppress(Exception):
                each.close()
        _stop(gw_a, gw_b)
