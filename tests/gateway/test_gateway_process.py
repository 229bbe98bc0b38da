"""The gateway as a real subprocess: lifecycle, tickets, turns, crash recovery and drain."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.gateway.client import Connection, GatewayError, GatewayHandle
from hermes_es.gateway.control import request_ticket
from tests.gateway.conftest import GatewayProcess, SlowModel, model_config, write_config


def _events(handle: GatewayHandle, sid: str) -> list[dict[str, Any]]:
    with handle.connect() as conn:
        result = conn.call("events.since", {"session_id": sid, "last_sequence": 0})
    events: list[dict[str, Any]] = result["events"]
    return events


def _types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"].removeprefix("hermes.") for e in events]


def _wait(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_lifecycle_files_one_per_profile_and_offline_turn(
    home: Path, gateway: GatewayProcess
) -> None:
    """gateway.json and the socket are 0600; a second gateway refuses naming the first's pid."""
    handle = gateway.start()
    assert stat.S_IMODE(os.stat(home / "gateway.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(home / "gateway.sock").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
    published = json.loads((home / "gateway.json").read_text())
    assert published["host"] == "127.0.0.1" and published["epoch"] == 1
    second = GatewayProcess(home, gateway.env)
    second.log = home / "second.log"
    with pytest.raises(AssertionError, match=f"pid {handle.endpoint.pid}"):
        second.start()
    assert second.proc is not None and second.proc.returncode == 1
    with handle.connect() as conn:
        created = conn.call("session.create", {"title": "lifecycle"})
        sid = created["session_id"]
        admitted = conn.call(
            "prompt.submit", {"session_id": sid, "submission_id": "s1", "text": "hello"}
        )
        streamed: list[dict[str, Any]] = []
        final = conn.wait_turn(sid, admitted["turn"], on_stream=streamed.append, timeout=30)
    assert final["event"]["outcome"] == "completed"
    # The turn runner's reply deltas reach attached clients live, before the stored turn.
    assert streamed and streamed[0]["item"]["type"] == "reply.delta"
    assert "hello" in "".join(s["item"].get("text", "") for s in streamed)
    assert gateway.terminate() == 0
    assert not (home / "gateway.json").exists()
    with SessionEngine(home / "state.db") as engine:
        assert engine.get(sid).message_count == 2


def test_tickets_none_reused_wrong_purpose_and_other_uid(
    home: Path, gateway: GatewayProcess
) -> None:
    """No ticket, a reused ticket, a wrong-purpose ticket and another uid are all refused."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    handle = gateway.start()
    url = handle.endpoint.ws_url
    with pytest.raises(InvalidStatus), connect(url):
        pass
    ticket = handle.ticket("interactive")
    with connect(f"{url}?ticket={ticket}") as first:
        first.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session.list"}))
        assert "result" in json.loads(first.recv(timeout=10))
    with pytest.raises(InvalidStatus), connect(f"{url}?ticket={ticket}"):
        pass  # single use
    http_ticket = handle.ticket("native-http")
    with pytest.raises(InvalidStatus), connect(f"{url}?ticket={http_ticket}"):
        pass  # minted for HTTP calls
    with pytest.raises(Exception, match="unknown purpose"):
        request_ticket(handle.paths.socket, "root")
    if os.getuid() != 0:
        pytest.skip("dropping to another uid needs root")
    # Another uid: the 0600 socket refuses it; made world-writable, SO_PEERCRED still does.
    assert _as_other_uid(handle.paths.socket) == "denied"
    # The test's own directories are 0700: expose the same socket through a hard link in an
    # open directory so that only the gateway's peer check stands in the way.
    open_dir = Path(tempfile.mkdtemp(prefix="gw-peer-", dir="/tmp"))
    try:
        os.chmod(open_dir, 0o755)
        exposed = open_dir / "gateway.sock"
        os.link(handle.paths.socket, exposed)
        os.chmod(exposed, 0o666)
        assert _as_other_uid(exposed).startswith("refused: uid 65534 may not use")
    finally:
        shutil.rmtree(open_dir)


def _as_other_uid(path: Path) -> str:
    """In a forked child running as uid 65534, ask for a ticket; report what happened."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_fd)
        try:
            os.setgid(65534)
            os.setuid(65534)
            try:
                request_ticket(path, "interactive")
                outcome = "granted"
            except Exception as exc:
                text = str(exc)
                outcome = (
                    "denied"
                    if "Permission denied" in text
                    else "refused: " + text.split("ticket: ", 1)[-1]
                )
            os.write(write_fd, outcome.encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    with os.fdopen(read_fd, "rb") as pipe:
        return pipe.read().decode()


def test_kill9_mid_turn_unknown_follower_waits_other_session_once(
    home: Path, gateway: GatewayProcess, slow_model: SlowModel
) -> None:
    """After SIGKILL mid-turn: that turn is unknown, its follower queued, the other session's
    turn completed exactly once; resolving runs the follower."""
    write_config(home, model_config(slow_model))
    handle = gateway.start()
    with handle.connect() as conn:
        a = conn.call("session.create", {"title": "slow one"})["session_id"]
        b = conn.call("session.create", {"title": "quick one"})["session_id"]
        done_b = conn.call(
            "prompt.submit", {"session_id": b, "submission_id": "b1", "text": "quick"}
        )
        conn.wait_turn(b, done_b["turn"], timeout=30)
        conn.call("prompt.submit", {"session_id": a, "submission_id": "a1", "text": "SLOW first"})
        conn.call("prompt.submit", {"session_id": a, "submission_id": "a2", "text": "second"})
        assert slow_model.arrived.wait(30)
    gateway.kill9()
    assert (home / "gateway.json").exists()  # a crash leaves it; the next start replaces it
    handle = gateway.start()
    assert handle.endpoint.epoch == 2
    events_a = _events(handle, a)
    assert "turn.unknown" in _types(events_a)
    assert _types(events_a).count("turn.started") == 1
    unknown = next(e for e in events_a if e["type"] == "hermes.turn.unknown")
    assert unknown["event"] == {**unknown["event"], "turn": 1, "epoch": 1, "detected_epoch": 2}
    time.sleep(0.5)
    assert slow_model.count("second") == 0  # the follower waits
    assert slow_model.count("quick") == 1
    events_b = _events(handle, b)
    assert [e["event"]["outcome"] for e in events_b if e["type"] == "hermes.turn.finished"] == [
        "completed"
    ]
    with handle.connect() as conn:
        listed = conn.call("session.list", {})["sessions"]
        assert {s["id"]: s["turn_state"] for s in listed}[a] == "unknown"
        conn.call("session.resume", {"ref": a})
        resolved = conn.call("turn.resolve", {"session_id": a, "resolution": "discard"})
        assert resolved["turn"] == 1
        final = conn.wait_turn(a, 2, timeout=30)
    assert final["event"]["outcome"] == "completed"
    assert slow_model.count("second") == 1
    assert slow_model.count("SLOW first") == 1  # never replayed
    assert gateway.terminate() == 0


def test_idempotent_submit_across_reconnect_and_shared_stream(
    home: Path, gateway: GatewayProcess
) -> None:
    """The same submission id after a reconnect is admitted once; two clients see one stream."""
    handle = gateway.start()
    watcher = handle.connect("tui")
    with handle.connect() as conn:
        sid = conn.call("session.create", {})["session_id"]
        watcher.call("session.resume", {"ref": sid})
        first = conn.call("prompt.submit", {"session_id": sid, "submission_id": "x", "text": "hi"})
    with handle.connect() as again:
        again.call("session.resume", {"ref": sid})
        retry = again.call("prompt.submit", {"session_id": sid, "submission_id": "x", "text": "hi"})
        assert retry["turn"] == first["turn"] and retry["duplicate"] is True
        seen: list[int] = []
        watcher.wait_turn(sid, first["turn"], on_event=lambda e: seen.append(e["sequence"]))
    replay = _events(handle, sid)
    assert seen == [e["sequence"] for e in replay[-len(seen) :]]
    assert seen == sorted(seen) and len(seen) >= 4
    assert _types(replay).count("turn.admitted") == 1
    with handle.connect() as conn:
        since = conn.call("events.since", {"session_id": sid, "last_sequence": seen[1]})
        assert [e["sequence"] for e in since["events"]] == seen[2:]
        with pytest.raises(GatewayError, match=r"invalid params for prompt\.submit") as bad:
            conn.call("prompt.submit", {"session_id": sid})
        assert bad.value.code == -32602
        with pytest.raises(GatewayError, match="only queued turns") as refused:
            conn.call("turn.cancel", {"session_id": sid, "turn": first["turn"]})
        assert refused.value.code == 4009
        with pytest.raises(GatewayError) as stale:
            conn.call("session.rename", {"session_id": sid, "title": "t", "expected_version": 1})
        assert stale.value.code == 4090
    watcher.close()


def test_sigterm_drains_running_turn_then_exits_zero(
    home: Path, gateway: GatewayProcess, slow_model: SlowModel
) -> None:
    """SIGTERM refuses new turns, lets the running one finish and exits 0."""
    write_config(home, model_config(slow_model))
    handle = gateway.start()
    conn = handle.connect()
    sid = conn.call("session.create", {})["session_id"]
    conn.call("prompt.submit", {"session_id": sid, "submission_id": "d1", "text": "SLOW drain"})
    assert slow_model.arrived.wait(30)
    assert gateway.proc is not None
    gateway.proc.send_signal(15)
    _wait(lambda: any(m.get("method") == "gateway.draining" for m in conn.notifications(0.2)))
    with pytest.raises(GatewayError, match="shutting down"):
        conn.call("prompt.submit", {"session_id": sid, "submission_id": "d2", "text": "late"})
    slow_model.release.set()
    assert gateway.terminate() == 0
    conn.close()
    with SessionEngine(home / "state.db") as engine:
        state = engine.get(sid)
        assert state.turn_state == "" and state.message_count == 2


def test_raw_socket_bad_frames_get_jsonrpc_errors(home: Path, gateway: GatewayProcess) -> None:
    """Garbage, a wrong version and an unknown method get JSON-RPC errors, not a crash."""
    from websockets.sync.client import connect

    handle = gateway.start()
    with connect(f"{handle.endpoint.ws_url}?ticket={handle.ticket('interactive')}") as ws:
        ws.send("not json")
        assert json.loads(ws.recv(timeout=10))["error"]["code"] == -32700
        ws.send(json.dumps({"jsonrpc": "1.0", "id": 2, "method": "session.list"}))
        assert json.loads(ws.recv(timeout=10))["error"]["code"] == -32600
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "nope"}))
        assert json.loads(ws.recv(timeout=10))["error"]["code"] == -32601
    assert socket.gethostbyname("127.0.0.1") == handle.endpoint.host
    _ = Connection


def test_worker_ticket_reaches_only_its_own_sessions(home: Path, gateway: GatewayProcess) -> None:
    """A worker connection may create and drive its own sessions, nothing else."""
    handle = gateway.start()
    with handle.connect() as operator:
        other = operator.call("session.create", {})["session_id"]
    with handle.connect("worker", purpose="worker") as worker:
        own = worker.call("session.create", {"source": "tool"})["session_id"]
        admitted = worker.call(
            "prompt.submit",
            {"session_id": own, "submission_id": "w1", "text": "work", "client_kind": "worker"},
        )
        assert worker.wait_turn(own, admitted["turn"], timeout=30)["event"]["outcome"] == (
            "completed"
        )
        for method, params in (
            ("session.resume", {"ref": other}),
            ("events.since", {"session_id": other}),
            ("session.rename", {"session_id": own, "title": "x"}),
        ):
            with pytest.raises(GatewayError) as refused:
                worker.call(method, params)
            assert refused.value.code == 4030, method
    history = _events(handle, own)
    assert history[1]["actor"] == f"uid:{os.getuid()}"
    assert history[1]["event"]["client_kind"] == "worker"
    assert gateway.terminate() == 0


def test_message_size_limit_from_config_refuses_at_admission(
    home: Path, gateway: GatewayProcess
) -> None:
    """``sessions.max_message_bytes`` applies through the gateway: an oversized prompt is
    refused when submitted, naming the limit, and nothing is admitted; a small one runs."""
    write_config(home, "sessions:\n  max_message_bytes: 4096\n")
    handle = gateway.start()
    with handle.connect() as conn:
        sid = conn.call("session.create", {"title": "limits"})["session_id"]
        with pytest.raises(GatewayError, match="4,096 bytes per message"):
            conn.call(
                "prompt.submit", {"session_id": sid, "submission_id": "big", "text": "x" * 5000}
            )
        admitted = conn.call(
            "prompt.submit", {"session_id": sid, "submission_id": "small", "text": "hi"}
        )
        final = conn.wait_turn(sid, admitted["turn"], timeout=30)
    assert final["event"]["outcome"] == "completed"
    assert admitted["turn"] == 1
    assert _types(_events(handle, sid)).count("turn.admitted") == 1  # the big one never was
    assert gateway.terminate() == 0


def test_live_events_are_the_log_and_an_idle_turn_takes_two_writes(
    home: Path, gateway: GatewayProcess
) -> None:
    """An attached client receives exactly the stored events, in order (sent from what the
    writer just committed); once its chat is in memory, a turn takes three writer use cases
    (admit; start + user message; reply + finish), and once a turn ran on the loop, the
    next one on the idle session two (admit + start + user message; reply + finish): none
    is spent finding the queue empty."""
    handle = gateway.start()
    seen: list[dict[str, Any]] = []
    writes: list[int] = []
    with handle.connect() as conn:
        created = conn.call("session.create", {"title": "stream"})
        sid = created["session_id"]
        for sub in ("first", "second", "third"):
            time.sleep(0.3)  # let the previous turn's runner settle
            before = conn.call("gateway.status", {})["writer_jobs"]
            admitted = conn.call(
                "prompt.submit", {"session_id": sid, "submission_id": sub, "text": f"hi {sub}"}
            )
            final = conn.wait_turn(sid, admitted["turn"], on_event=seen.append, timeout=30)
            assert final["event"]["outcome"] == "completed"
            time.sleep(0.3)
            writes.append(conn.call("gateway.status", {})["writer_jobs"] - before)
    stored = [e for e in _events(handle, sid) if e["sequence"] > created["live_after"]]
    assert seen == stored
    assert writes[0] >= 5  # the first turn (threaded runner) also stores the system prompt
    assert writes[1:] == [3, 2]
    types = _types(stored)
    assert types.count("turn.started") == 3 and types.count("turn.finished") == 3
