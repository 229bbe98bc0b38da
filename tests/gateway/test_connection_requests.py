"""A connection's requests through a real gateway process (``gateway.connection``): taken from
the WebSocket protocol as they arrive, run one at a time and answered in order, past the
read-ahead bound too; what arrived before a close still runs; a binary frame closes 1003."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from hermes_es.gateway.client import GatewayHandle
from hermes_es.gateway.wire import READ_AHEAD
from tests.gateway.conftest import GatewayProcess


def _open(handle: GatewayHandle) -> Any:
    return connect(f"{handle.endpoint.ws_url}?ticket={handle.ticket('interactive')}")


def _call(ws: Any, rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}))
    while True:
        message = json.loads(ws.recv(timeout=30))
        if message.get("id") == rid:
            result: dict[str, Any] = message["result"]
            return result


def _request(rid: int, method: str, params: dict[str, Any]) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


def test_requests_past_the_read_ahead_are_answered_in_order(
    home: Path, gw_env: dict[str, str]
) -> None:
    """More than ``READ_AHEAD`` requests sent at once on one connection (submissions, reads,
    a bad request, a duplicate), none waiting for an answer: every one is answered, in
    request order, the admissions with consecutive turns (the duplicate with its first one's),
    the bad one with its error; then the connection still serves a call."""
    gw_env["HERMES_RESPONDER"] = "offline"
    gateway = GatewayProcess(home, gw_env)
    handle = gateway.start()
    count = READ_AHEAD + 8
    try:
        with _open(handle) as ws:
            sid = _call(ws, 1, "session.create", {})["session_id"]
            sent: list[tuple[int, str]] = []
            for n in range(count):
                rid = 100 + n
                if n % 5 == 3:
                    ws.send(_request(rid, "events.since", {"session_id": sid}))
                    sent.append((rid, "since"))
                elif n == 7:
                    ws.send(_request(rid, "prompt.submit", {"session_id": sid}))  # no text
                    sent.append((rid, "bad"))
                elif n == 11:  # the id of request 100's submission again
                    params = {"session_id": sid, "submission_id": "s0", "text": "again"}
                    ws.send(_request(rid, "prompt.submit", params))
                    sent.append((rid, "duplicate"))
                else:
                    params = {"session_id": sid, "submission_id": f"s{n}", "text": f"p {n}"}
                    ws.send(_request(rid, "prompt.submit", params))
                    sent.append((rid, "submit"))
            answers: list[dict[str, Any]] = []
            while len(answers) < count:
                message = json.loads(ws.recv(timeout=60))
                if "id" in message and "method" not in message:
                    answers.append(message)
            assert _call(ws, 2, "gateway.status", {})["role"] == "owner"
    finally:
        assert gateway.terminate() == 0
    assert [a["id"] for a in answers] == [rid for rid, _ in sent]
    turns = []
    for answer, (_, kind) in zip(answers, sent, strict=True):
        if kind == "bad":
            assert answer["error"]["code"] == -32602  # invalid params, named
        elif kind == "since":
            assert answer["result"]["session_id"] == sid
        elif kind == "duplicate":
            assert answer["result"]["duplicate"]
            assert answer["result"]["turn"] == answers[0]["result"]["turn"]
        else:
            assert not answer["result"]["duplicate"]
            turns.append(answer["result"]["turn"])
    assert turns == list(range(1, len(turns) + 1))


def test_what_arrived_before_a_close_still_runs(home: Path, gw_env: dict[str, str]) -> None:
    """Three submissions sent and the connection closed at once, without reading any answer:
    all three are admitted and run (a closed connection only detaches its client)."""
    gw_env["HERMES_RESPONDER"] = "offline"
    gateway = GatewayProcess(home, gw_env)
    handle = gateway.start()
    try:
        with _open(handle) as ws:
            sid = _call(ws, 1, "session.create", {})["session_id"]
            for n in range(3):
                params = {"session_id": sid, "submission_id": f"c{n}", "text": f"close {n}"}
                ws.send(_request(10 + n, "prompt.submit", params))
        deadline = time.monotonic() + 30
        with _open(handle) as ws:
            while True:
                events = _call(ws, 1, "events.since", {"session_id": sid})["events"]
                finished = [e for e in events if e["type"] == "hermes.turn.finished"]
                if len(finished) == 3 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
    finally:
        assert gateway.terminate() == 0
    admitted = [e["event"]["text"] for e in events if e["type"] == "hermes.turn.admitted"]
    assert admitted == ["close 0", "close 1", "close 2"]
    assert [e["event"]["outcome"] for e in finished] == ["completed"] * 3


def test_a_binary_frame_closes_the_connection_1003(home: Path, gateway: GatewayProcess) -> None:
    """A binary frame is not a JSON-RPC request: the gateway closes the connection with 1003
    (after answering what came before it) and keeps serving other connections."""
    handle = gateway.start()
    with _open(handle) as ws:
        ws.send(_request(1, "gateway.status", {}))
        ws.send(b"\x00\x01")
        assert json.loads(ws.recv(timeout=30))["id"] == 1
        try:
            while True:
                ws.recv(timeout=30)
        except ConnectionClosed as exc:
            assert exc.rcvd is not None and exc.rcvd.code == 1003
    with _open(handle) as ws:
        assert _call(ws, 1, "gateway.status", {})["role"] == "owner"
