"""Two gateway processes (separate HERMES_HOMEs, as on two hosts) on one PostgreSQL database."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from hermes_es.gateway import protocol as p
from hermes_es.gateway.client import Connection, GatewayError
from hermes_es.gateway.failover import connect_owner
from hermes_es.gateway.paths import GatewayPaths, read_endpoint
from tests.gateway.conftest import GatewayProcess, SlowModel, model_config, write_config

TAKEOVER_BOUND_S = 5.0
STATUS = ("gateway", "status", "--json")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "RESET" not in k.upper()}
    env.update(HERMES_HOME=str(home), HERMES_RESPONDER="", COLUMNS="200")
    env.pop("HERMES_NO_GATEWAY", None)
    env.pop("HERMES_STORE_URL", None)
    return env


def _host(tmp_path: Path, name: str, model: SlowModel) -> tuple[Path, dict[str, str]]:
    home = tmp_path / name
    home.mkdir()
    write_config(home, model_config(model))
    return home, _env(home)


def _status(env: dict[str, str]) -> dict[str, Any]:
    ran = subprocess.run(
        [sys.executable, "-c", "from hermes_es.cli import main; main()", *STATUS],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    info: dict[str, Any] = json.loads(ran.stdout)
    return info


class Watcher:
    """The stored events one connection receives for a session, checked for order and gaps."""

    def __init__(self, conn: Connection, session_id: str, after: int) -> None:
        self.conn = conn
        self.session_id = session_id
        self.sequences: list[int] = []
        self.events: list[dict[str, Any]] = []
        self.after = after

    def until(self, type_: str, turn: int, timeout: float = 30.0) -> dict[str, Any]:
        """Read pushed events until one of ``type_`` for ``turn`` arrives."""
        deadline = time.monotonic() + timeout
        for seen in self.events:
            if seen["type"] == type_ and seen["event"].get("turn") == turn:
                return seen
        while time.monotonic() < deadline:
            for message in self.conn.notifications(timeout=0.5):
                params = message.get("params") or {}
                if message.get("method") != "session.event":
                    continue
                if params.get("session_id") != self.session_id:
                    continue
                self.sequences.append(int(params["sequence"]))
                self.events.append(params)
                if params["type"] == type_ and params["event"].get("turn") == turn:
                    return params
        raise AssertionError(f"no {type_} for turn {turn} within {timeout} s: {self.events}")

    def check_ordered(self) -> None:
        """Every event once, in order, without a gap since attaching."""
        assert self.sequences == list(range(self.after + 1, self.after + 1 + len(self.sequences)))


def _wait_role(home: Path, role: str, timeout: float) -> float:
    """Seconds until the gateway.json in ``home`` says ``role``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        endpoint = read_endpoint(GatewayPaths(home))
        if endpoint is not None and endpoint.role == role:
            return time.monotonic() - started
        time.sleep(0.01)
    raise AssertionError(f"{home} did not become {role} within {timeout} s")


def test_team_standby_takes_over_after_owner_kill9(
    tmp_path: Path, slow_model: SlowModel, pg_url: str
) -> None:
    """Gateway B on the same database as A is a standby (status names A as owner; an
    owner-only method is refused with NOT_OWNER naming A's endpoint) whose client sees A's
    commits live via NOTIFY; SIGKILL of A mid-turn: B takes over within 5 s in a new epoch,
    the interrupted turn is unknown and its follower waits; a client reconnects to B and
    replays the gap with events.since; after resolve the follower runs once; a restarted A is
    a standby whose client sees B's commits live."""
    home_a, env_a = _host(tmp_path, "host-a", slow_model)
    home_b, env_b = _host(tmp_path, "host-b", slow_model)
    store = ("--store", pg_url)
    gw_a, gw_b = GatewayProcess(home_a, env_a, store), GatewayProcess(home_b, env_b, store)
    opened: list[Connection] = []
    try:
        handle_a = gw_a.start()
        assert handle_a.endpoint.role == "owner"
        epoch_a = handle_a.endpoint.epoch
        handle_b = gw_b.start()
        assert handle_b.endpoint.role == "standby"
        status = _status(env_b)
        assert status["role"] == "standby"
        assert status["owner"]["instance_id"] == handle_a.endpoint.instance_id
        assert status["owner"]["port"] == handle_a.endpoint.port
        assert [(m["role"], m["port"]) for m in status["members"]] == [
            ("owner", handle_a.endpoint.port),
            ("standby", handle_b.endpoint.port),
        ]

        conn_a = handle_a.connect()
        opened.append(conn_a)
        sid = conn_a.call("session.create", {"title": "team"})["session_id"]
        first = conn_a.call(
            "prompt.submit", {"session_id": sid, "submission_id": "s1", "text": "hello team"}
        )
        assert conn_a.wait_turn(sid, first["turn"], timeout=30)["event"]["outcome"] == "completed"

        conn_b = handle_b.connect()
        opened.append(conn_b)
        attached = conn_b.call("session.resume", {"ref": sid})
        watcher = Watcher(conn_b, sid, attached["live_after"])
        with pytest.raises(GatewayError) as refused:
            conn_b.call("session.pin", {"session_id": sid})
        assert refused.value.code == p.NOT_OWNER
        assert f"ws://127.0.0.1:{handle_a.endpoint.port}/ws" in refused.value.message
        assert refused.value.data["owner"]["instance_id"] == handle_a.endpoint.instance_id

        conn_a.call("prompt.submit", {"session_id": sid, "submission_id": "s2", "text": "SLOW 2"})
        follower = conn_a.call(
            "prompt.submit", {"session_id": sid, "submission_id": "s3", "text": "after slow"}
        )
        assert slow_model.arrived.wait(30)
        watcher.until("hermes.turn.started", 2)  # committed by A, seen by B's client
        watcher.until("hermes.turn.admitted", 3)
        seen_by_a = follower["version"]

        killed = time.monotonic()
        gw_a.kill9()
        _wait_role(home_b, "owner", 15.0)
        took = time.monotonic() - killed
        assert took < TAKEOVER_BOUND_S, f"takeover took {took:.2f} s"
        endpoint_b = read_endpoint(GatewayPaths(home_b))
        assert endpoint_b is not None and endpoint_b.epoch == epoch_a + 1
        watcher.until("hermes.turn.unknown", 2)

        conn = connect_owner([home_a, home_b], timeout=10)  # A's files are stale: B answers
        opened.append(conn)
        missed = conn.call("events.since", {"session_id": sid, "last_sequence": seen_by_a})
        types = [(e["type"], e["event"].get("turn")) for e in missed["events"]]
        assert ("hermes.turn.unknown", 2) in types
        assert ("hermes.turn.started", 3) not in types  # the follower waits for a resolve
        summary = conn.call("session.resume", {"ref": sid})
        assert summary["unknown"] == [2] and summary["queued"] == [3]
        assert slow_model.count("after slow") == 0
        status = _status(env_b)
        assert status["role"] == "owner" and status["epoch"] == epoch_a + 1

        conn.call("turn.resolve", {"session_id": sid, "turn": 2})
        done = conn.wait_turn(sid, 3, timeout=30)
        assert done["event"]["outcome"] == "completed"
        assert slow_model.count("SLOW 2") == 1 and slow_model.count("after slow") == 1
        watcher.until("hermes.turn.finished", 3)
        watcher.check_ordered()

        gw_a2 = GatewayProcess(home_a, env_a, store)
        gw_a = gw_a2
        handle_a2 = gw_a2.start()
        assert handle_a2.endpoint.role == "standby"
        conn_a2 = handle_a2.connect()
        opened.append(conn_a2)
        watcher_a = Watcher(
            conn_a2, sid, conn_a2.call("session.resume", {"ref": sid})["live_after"]
        )
        fourth = conn.call(
            "prompt.submit", {"session_id": sid, "submission_id": "s4", "text": "on b"}
        )
        watcher_a.until("hermes.turn.finished", fourth["turn"])
        watcher_a.check_ordered()
        assert gw_a2.terminate() == 0  # a standby stops at once
        assert gw_b.terminate() == 0
    finally:
        for each in opened:
            with contextlib.suppress(Exception):
                each.close()
        for gateway in (gw_a, gw_b):
            if gateway.proc is not None and gateway.proc.poll() is None:
                gateway.proc.kill()
                gateway.proc.wait(10)


def test_owner_that_loses_its_lock_connection_exits_and_standby_takes_over(
    tmp_path: Path, slow_model: SlowModel, pg_url: str
) -> None:
    """When the owner's lock connection ends while the process lives (its backend terminated,
    as when the network drops) during a turn, the owner exits 1 at once (not waiting for the
    turn), and the standby owns the profile in the next epoch with that turn unknown."""
    home_a, env_a = _host(tmp_path, "host-a", slow_model)
    home_b, env_b = _host(tmp_path, "host-b", slow_model)
    store = ("--store", pg_url)
    gw_a, gw_b = GatewayProcess(home_a, env_a, store), GatewayProcess(home_b, env_b, store)
    try:
        handle_a = gw_a.start()
        epoch = handle_a.endpoint.epoch
        handle_b = gw_b.start()
        assert handle_b.endpoint.role == "standby"
        with handle_a.connect() as conn:
            sid = conn.call("session.create", {"title": "lost"})["session_id"]
            conn.call("prompt.submit", {"session_id": sid, "submission_id": "s", "text": "SLOW"})
            assert slow_model.arrived.wait(30)
        with psycopg.connect(pg_url, autocommit=True) as admin:
            row = admin.execute(
                "SELECT backend_pid FROM hermes_gateways WHERE role = 'owner'"
            ).fetchone()
            assert row is not None
            admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
        assert gw_a.proc is not None and gw_a.proc.wait(15) == 1  # the model still holds
        assert "no longer owns profile default" in gw_a.output()
        _wait_role(home_b, "owner", 10.0)
        endpoint = read_endpoint(GatewayPaths(home_b))
        assert endpoint is not None and endpoint.epoch == epoch + 1
        with handle_b.connect() as conn:
            assert conn.call("session.resume", {"ref": sid})["unknown"] == [1]
        assert slow_model.count("SLOW") == 1
        assert gw_b.terminate() == 0
    finally:
        for gateway in (gw_a, gw_b):
            if gateway.proc is not None and gateway.proc.poll() is None:
                gateway.proc.kill()
                gateway.proc.wait(10)
