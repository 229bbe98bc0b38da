"""``session.create`` made once by its ``create_id``: on one gateway, racing on a team's two
gateways, and sent again to the standby that took over from a SIGKILLed owner."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest

from hermes_es.cli.gateway_chat import _resend
from hermes_es.gateway import protocol as p
from hermes_es.gateway.client import Connection, GatewayError
from hermes_es.gateway.failover import connect_owner
from tests.gateway.conftest import GatewayProcess, SlowModel, model_config, write_config
from tests.gateway.test_team_gateway import _env, _wait_role


def _sessions(conn: Connection) -> list[str]:
    rows = conn.call("session.list", {"limit": 100})["sessions"]
    return sorted(str(r["id"]) for r in rows)


def test_create_with_one_create_id_twice_makes_one_session(
    home: Path, gateway: GatewayProcess
) -> None:
    """On a SQLite gateway the same create id on a second connection answers with the first
    session (``duplicate: true``, attached: it sees that session's turns) and stores no other;
    another id makes another; a malformed id is -32602 naming ``$.create_id``; a session the
    creating connection closed unused is removed with its claim, so the id then makes a new
    one."""
    handle = gateway.start()
    with handle.connect() as first, handle.connect() as second:
        made = first.call("session.create", {"title": "once", "create_id": "c1"})
        assert made["duplicate"] is False
        again = second.call("session.create", {"title": "once", "create_id": "c1"})
        assert again["session_id"] == made["session_id"] and again["duplicate"] is True
        assert _sessions(first) == [made["session_id"]]
        sid = made["session_id"]
        admitted = second.call(
            "prompt.submit", {"session_id": sid, "submission_id": "s1", "text": "hi"}
        )
        assert second.wait_turn(sid, admitted["turn"], timeout=30)["event"]["outcome"] == (
            "completed"
        )
        other = first.call("session.create", {"create_id": "c2"})
        assert other["session_id"] != sid and other["duplicate"] is False
        with pytest.raises(GatewayError) as bad:
            first.call("session.create", {"create_id": "no spaces"})
        assert bad.value.code == p.INVALID_PARAMS and "$.create_id" in bad.value.message
        closed = first.call("session.close", {"session_id": other["session_id"]})
        assert closed["removed"] is True
        fresh = first.call("session.create", {"create_id": "c2"})
        assert fresh["duplicate"] is False and fresh["session_id"] != other["session_id"]
        assert _sessions(first) == sorted([sid, fresh["session_id"]])
    assert gateway.terminate() == 0


def _host(tmp_path: Path, name: str, model: SlowModel, url: str) -> Path:
    home = tmp_path / name
    home.mkdir()
    write_config(home, model_config(model, f"store: {{url: '{url}'}}\n"))
    return home


def test_create_sent_again_after_a_takeover_returns_the_same_session(
    tmp_path: Path, slow_model: SlowModel, pg_url: str
) -> None:
    """On a team (two gateways, one PostgreSQL database): one create id sent at once to the
    owner and to the standby makes one session (one answer is the duplicate); a create made on
    the owner and sent again with its id by the CLI's resend after the owner is SIGKILLed
    (its connection dropped; the standby took over) answers with that session, attached and
    usable, and no extra session exists."""
    home_a, home_b = (
        _host(tmp_path, "host-a", slow_model, pg_url),
        _host(tmp_path, "host-b", slow_model, pg_url),
    )
    gw_a, gw_b = GatewayProcess(home_a, _env(home_a)), GatewayProcess(home_b, _env(home_b))
    opened: list[Connection] = []
    try:
        handle_a = gw_a.start()
        assert handle_a.endpoint.role == "owner"
        handle_b = gw_b.start()
        assert handle_b.endpoint.role == "standby"
        conn_a, conn_b = handle_a.connect(), handle_b.connect()
        opened += [conn_a, conn_b]

        answers: dict[str, dict[str, Any]] = {}
        start = threading.Barrier(2)

        def race(name: str, conn: Connection) -> None:
            start.wait(10)
            answers[name] = conn.call("session.create", {"create_id": "raced"})

        threads = [
            threading.Thread(target=race, args=("a", conn_a)),
            threading.Thread(target=race, args=("b", conn_b)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert answers["a"]["session_id"] == answers["b"]["session_id"]
        assert sorted([answers["a"]["duplicate"], answers["b"]["duplicate"]]) == [False, True]

        params = {"title": "before the kill", "create_id": "k1"}
        made = conn_a.call("session.create", params)
        sid = made["session_id"]
        gw_a.kill9()

        def relink() -> Connection | None:
            again = connect_owner([home_a, home_b], timeout=10)
            opened.append(again)
            return again

        # the CLI's resend: the dead owner's connection drops, the live owner answers
        conn, again = _resend(conn_a, "session.create", params, relink)
        assert conn is not conn_a and _wait_role(home_b, "owner", 1.0) >= 0
        assert again["session_id"] == sid and again["duplicate"] is True
        assert again["title"] == "before the kill"
        assert _sessions(conn) == sorted([sid, answers["a"]["session_id"]])
        admitted = conn.call(
            "prompt.submit", {"session_id": sid, "submission_id": "s1", "text": "after"}
        )
        assert conn.wait_turn(sid, admitted["turn"], timeout=30)["event"]["outcome"] == (
            "completed"
        )
        assert slow_model.count("after") == 1
        assert gw_b.terminate() == 0
    finally:
        for each in opened:
            with contextlib.suppress(Exception):
                each.close()
        for gateway in (gw_a, gw_b):
            if gateway.proc is not None and gateway.proc.poll() is None:
                gateway.proc.kill()
                gateway.proc.wait(10)
