"""The admission path through a real gateway process: answers written by the connection's own
handler stay in order with the pushed stream, and the admission trace (``HERMES_GATEWAY_TRACE``)
stamps every stage of each admission."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

from hermes_es.gateway.client import GatewayHandle
from hermes_es.gateway.trace import STAGES
from tests.gateway.conftest import GatewayProcess

SUBMITS = 6


def _open(handle: GatewayHandle) -> Any:
    return connect(f"{handle.endpoint.ws_url}?ticket={handle.ticket('interactive')}")


def _call(ws: Any, rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}))
    while True:
        message = json.loads(ws.recv(timeout=30))
        if message.get("id") == rid:
            result: dict[str, Any] = message["result"]
            return result


def _until_finished(ws: Any, turns: int, frames: list[dict[str, Any]]) -> None:
    """Read frames into ``frames`` until ``turns`` turns have finished."""
    finished = 0
    while finished < turns:
        message = json.loads(ws.recv(timeout=30))
        frames.append(message)
        if message.get("params", {}).get("type") == "hermes.turn.finished":
            finished += 1


def test_pipelined_submits_are_answered_in_order_behind_their_stream(
    home: Path, gw_env: dict[str, str]
) -> None:
    """Six prompts sent back to back on one connection: the answers come in request order,
    each after the ``turn.admitted`` event of its turn (what was queued for the connection
    goes out before the answer the handler writes itself), the turns run first in first out,
    and a second attached client receives exactly the same ordered, gapless stream."""
    gw_env["HERMES_RESPONDER"] = "offline"
    gateway = GatewayProcess(home, gw_env)
    handle = gateway.start()
    try:
        with _open(handle) as submitter, _open(handle) as watcher:
            sid = _call(submitter, 1, "session.create", {})["session_id"]
            _call(watcher, 1, "session.resume", {"ref": sid})
            for n in range(SUBMITS):  # none waits for the answer to the one before
                params = {"session_id": sid, "submission_id": f"s{n}", "text": f"prompt {n}"}
                request = {"jsonrpc": "2.0", "id": 10 + n, "method": "prompt.submit"}
                submitter.send(json.dumps({**request, "params": params}))
            mine: list[dict[str, Any]] = []
            theirs: list[dict[str, Any]] = []
            _until_finished(submitter, SUBMITS, mine)
            _until_finished(watcher, SUBMITS, theirs)
    finally:
        assert gateway.terminate() == 0
    answers = [(i, m) for i, m in enumerate(mine) if "id" in m]
    assert [m["id"] for _, m in answers] == [10 + n for n in range(SUBMITS)]
    turns = [m["result"]["turn"] for _, m in answers]
    assert turns == list(range(1, SUBMITS + 1))
    for (index, message), turn in zip(answers, turns, strict=True):
        admitted = [
            i
            for i, m in enumerate(mine)
            if m.get("params", {}).get("type") == "hermes.turn.admitted"
            and m["params"]["event"]["turn"] == turn
        ]
        assert admitted and admitted[0] < index, (turn, message)

    def stored(frames: list[dict[str, Any]]) -> list[tuple[int, str]]:
        return [
            (m["params"]["sequence"], m["params"]["type"])
            for m in frames
            if m.get("method") == "session.event"
        ]

    assert stored(mine) == stored(theirs)
    sequences = [s for s, _ in stored(mine)]
    assert sequences == list(range(sequences[0], sequences[0] + len(sequences)))
    finished = [
        m["params"]["event"]["turn"]
        for m in mine
        if m.get("params", {}).get("type") == "hermes.turn.finished"
    ]
    assert finished == list(range(1, SUBMITS + 1))


def test_the_admission_trace_stamps_each_stage_in_order(
    home: Path, gw_env: dict[str, str], tmp_path: Path
) -> None:
    """With ``HERMES_GATEWAY_TRACE`` (and ``_CPU``) set, the gateway writes at shut-down one
    record per admission with every stage of its path stamped in order (bytes received,
    read, handed to the writer, run, committed, resumed, answer written), each stamp with
    the loop's and the writer's thread CPU clocks; without it, no file is written."""
    trace = tmp_path / "trace.json"
    gw_env.update(
        HERMES_RESPONDER="offline", HERMES_GATEWAY_TRACE=str(trace), HERMES_GATEWAY_TRACE_CPU="1"
    )
    gateway = GatewayProcess(home, gw_env)
    handle = gateway.start()
    try:
        with _open(handle) as ws:
            sid = _call(ws, 1, "session.create", {})["session_id"]
            for n in range(3):
                params = {"session_id": sid, "submission_id": f"t{n}", "text": "hello"}
                assert _call(ws, 2 + n, "prompt.submit", params)["turn"] == n + 1
    finally:
        assert gateway.terminate() == 0
    stamps = json.loads(trace.read_bytes())["admissions"]
    assert sorted(stamps) == ["t0", "t1", "t2"]
    for key, stages in stamps.items():
        assert sorted(stages) == sorted(STAGES), key
        walls = [stages[s][0] for s in STAGES]
        assert walls == sorted(walls), (key, stages)
        loop_cpu = [stages[s][1] for s in STAGES]
        assert all(len(stages[s]) == 3 for s in STAGES)
        assert loop_cpu == sorted(loop_cpu), (key, stages)

    del gw_env["HERMES_GATEWAY_TRACE"]
    again = GatewayProcess(home, gw_env)
    handle = again.start()
    trace.unlink()
    try:
        with _open(handle) as ws:
            sid = _call(ws, 1, "session.create", {})["session_id"]
            _call(ws, 2, "prompt.submit", {"session_id": sid, "submission_id": "u", "text": "x"})
    finally:
        assert again.terminate() == 0
    assert not trace.exists()
