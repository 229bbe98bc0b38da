"""The team relay: a standby admits submissions the owner runs, and streams the owner's live
``turn.stream`` items to its own clients (two gateway processes on one real PostgreSQL)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_es.gateway import protocol as p
from hermes_es.gateway.client import Connection, GatewayError
from hermes_es.store.postgres.relay import MAX_PAYLOAD, Reassembler, payloads
from tests.gateway.conftest import GatewayProcess
from tests.gateway.test_team_gateway import _env
from tests.openai_server import fake_model


def _host(tmp_path: Path, name: str, model_url: str, pg_url: str) -> Path:
    home = tmp_path / name
    home.mkdir()
    (home / "config.yaml").write_text(
        f"model:\n  provider: openai\n  base_url: {model_url}\n  name: test-model\n"
        f"  max_retries: 0\n  timeout: 10\nstore: {{url: '{pg_url}'}}\n",
        encoding="utf-8",
    )
    return home


def _follow(conn: Connection, sid: str, turn: int, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The session's notifications one connection receives until ``turn`` finishes."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for message in conn.notifications(timeout=0.5):
            params = message.get("params") or {}
            if params.get("session_id") != sid:
                continue
            got.append(message)
            event = params.get("event") or {}
            if (
                message.get("method") == "session.event"
                and params.get("type") == "hermes.turn.finished"
                and event.get("turn") == turn
            ):
                return got
    raise AssertionError(f"turn {turn} did not finish within {timeout} s: {got}")


def _deltas(got: list[dict[str, Any]], turn: int) -> tuple[list[int], str, int]:
    """(stream indexes in arrival order, the reply text they carry, how many stream items
    arrived after the turn's finished event)."""
    indexes: list[int] = []
    text = ""
    finished_at = None
    late = 0
    for position, message in enumerate(got):
        params = message["params"]
        if message["method"] == "session.event":
            if params["type"] == "hermes.turn.finished" and params["event"]["turn"] == turn:
                finished_at = position
            continue
        if message["method"] != "turn.stream" or params["turn"] != turn:
            continue
        if finished_at is not None:
            late += 1
        indexes.append(int(params["index"]))
        item = params["item"]
        if item.get("type") == "reply.delta":
            text += str(item["text"])
    return indexes, text, late


def test_standby_admits_and_its_clients_see_the_owners_stream_in_order(
    tmp_path: Path, pg_url: str
) -> None:
    """A prompt submitted on the standby is admitted there and run once by the owner; the
    owner's streamed reply items reach a client of the standby as they reach the owner's own
    client: the same items, numbered 1..n in order, none twice, all before the turn's
    finished event; a resubmission of the same submission id on the owner answers with the
    same admission; deletes stay the owner's (NOT_OWNER)."""
    with fake_model(slow_delay=0.05) as model:
        home_a = _host(tmp_path, "host-a", model.base_url, pg_url)
        home_b = _host(tmp_path, "host-b", model.base_url, pg_url)
        gw_a, gw_b = GatewayProcess(home_a, _env(home_a)), GatewayProcess(home_b, _env(home_b))
        opened: list[Connection] = []
        try:
            handle_a = gw_a.start()
            assert handle_a.endpoint.role == "owner"
            handle_b = gw_b.start()
            assert handle_b.endpoint.role == "standby"
            conn_b = handle_b.connect()
            opened.append(conn_b)
            sid = conn_b.call("session.create", {"title": "relay"})["session_id"]
            conn_a = handle_a.connect()
            opened.append(conn_a)
            conn_a.call("session.resume", {"ref": sid})

            admitted = conn_b.call(
                "prompt.submit", {"session_id": sid, "submission_id": "r1", "text": "slow 12"}
            )
            assert admitted["turn"] == 1 and not admitted["duplicate"]
            seen_b = _follow(conn_b, sid, 1)
            seen_a = _follow(conn_a, sid, 1)
            indexes_b, text_b, late_b = _deltas(seen_b, 1)
            indexes_a, text_a, late_a = _deltas(seen_a, 1)
            assert indexes_a and indexes_a == list(range(1, len(indexes_a) + 1))
            assert indexes_b == indexes_a  # every item once, in order, on the standby too
            assert late_a == 0 and late_b == 0
            assert [m["params"]["item"] for m in seen_b if m["method"] == "turn.stream"] == [
                m["params"]["item"] for m in seen_a if m["method"] == "turn.stream"
            ]
            assert text_b == text_a and "piece11" in text_b
            assert sum(1 for r in model.requests if "slow 12" in str(r["messages"][-1])) == 1

            again = conn_a.call(
                "prompt.submit", {"session_id": sid, "submission_id": "r1", "text": "slow 12"}
            )
            assert again["turn"] == 1 and again["duplicate"]
            with pytest.raises(GatewayError) as refused:
                conn_b.call("sessions.delete", {"session_ids": [sid]})
            assert refused.value.code == p.NOT_OWNER
            assert sum(1 for r in model.requests if "slow 12" in str(r["messages"][-1])) == 1
            assert gw_b.terminate() == 0
            assert gw_a.terminate() == 0
        finally:
            for each in opened:
                with contextlib.suppress(Exception):
                    each.close()
            for gateway in (gw_a, gw_b):
                if gateway.proc is not None and gateway.proc.poll() is None:
                    gateway.proc.kill()
                    gateway.proc.wait(10)


def test_relay_chunks_a_message_over_the_payload_limit_and_skips_its_own() -> None:
    """A message too big for one NOTIFY is split into chunks under PostgreSQL's limit that
    put back together give the message; a gateway ignores what it sent itself."""
    message = {"t": "stream", "p": {"text": 'é"\\\x01' * 5000, "n": 1}}
    parts = payloads("gw-a", message)
    assert len(parts) > 1 and all(len(x.encode()) <= MAX_PAYLOAD for x in parts)
    receiver = Reassembler("gw-b")
    results = [receiver.feed(x) for x in parts]
    assert results[:-1] == [None] * (len(parts) - 1) and results[-1] == ("gw-a", message)
    assert Reassembler("gw-a").feed(parts[0]) is None
    small = payloads("gw-a", {"t": "kick", "s": "x"})
    assert len(small) == 1 and receiver.feed(small[0]) == ("gw-a", {"t": "kick", "s": "x"})
    assert receiver.feed(parts[1]) is None  # a chunk without its start is dropped


def test_a_kick_lost_while_the_owners_listener_reconnects_is_sent_again(
    tmp_path: Path, pg_url: str
) -> None:
    """A standby's kick is live-only: when the owner's listener connection is cut just as a
    prompt is submitted on the standby (so the kick is never heard), the standby sends it again
    while the turn may start and none runs, and the owner runs the turn once."""
    import psycopg

    with fake_model(slow_delay=0.05) as model:
        home_a = _host(tmp_path, "host-a", model.base_url, pg_url)
        home_b = _host(tmp_path, "host-b", model.base_url, pg_url)
        gw_a, gw_b = GatewayProcess(home_a, _env(home_a)), GatewayProcess(home_b, _env(home_b))
        opened: list[Connection] = []
        try:
            assert gw_a.start().endpoint.role == "owner"
            handle_b = gw_b.start()
            conn_b = handle_b.connect()
            opened.append(conn_b)
            sid = conn_b.call("session.create", {"title": "rekick"})["session_id"]
            with psycopg.connect(pg_url, autocommit=True) as admin:
                cut = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE application_name = 'hermes-gateway-listen'"
                ).fetchone()
            assert cut is not None and cut[0] == 2
            admitted = conn_b.call(
                "prompt.submit", {"session_id": sid, "submission_id": "k1", "text": "hello"}
            )
            seen = _follow(conn_b, sid, admitted["turn"], timeout=20)
            finished = [m for m in seen if m["params"].get("type") == "hermes.turn.finished"]
            assert finished[-1]["params"]["event"]["outcome"] == "completed"
            assert sum(1 for r in model.requests if r["messages"][-1]["content"] == "hello") == 1
        finally:
            for each in opened:
                with contextlib.suppress(Exception):
                    each.close()
            for gateway in (gw_a, gw_b):
                if gateway.proc is not None and gateway.proc.poll() is None:
                    gateway.proc.kill()
                    gateway.proc.wait(10)
