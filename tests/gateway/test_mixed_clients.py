"""Real WebSocket clients and real ``hermes`` programs on a pty attached to one session of a
gateway process: they share one ordered stream, each sees the other's turns, every event is
acted by the native identity; a terminal killed with SIGKILL leaves an orphan that is reaped
after the grace, and one whose user comes back (``hermes -r``) within the grace keeps it."""

from __future__ import annotations

import io
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pexpect

from hermes_es.commands.engine import SessionEngine
from tests.gateway.conftest import GatewayProcess, write_config

ENTRY = "from hermes_es.cli import main; main()"
PROMPT = "› "


def _terminal(env: dict[str, str], home: Path, *args: str) -> tuple[pexpect.spawn, io.StringIO]:
    seen = io.StringIO()
    child = pexpect.spawn(
        sys.executable,
        ["-c", ENTRY, *args],
        env={**env, "NO_COLOR": "1"},
        cwd=str(home),
        encoding="utf-8",
        timeout=40,
        dimensions=(50, 200),
    )
    child.logfile_read = seen
    child.expect_exact(PROMPT)
    return child, seen


def _state(home: Path, sid: str) -> Any:
    with SessionEngine(home / "state.db") as engine:
        return engine.get(sid)


def _until(predicate: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_websocket_clients_and_terminals_share_one_sessions_stream(
    home: Path, gateway: GatewayProcess, gw_env: dict[str, str]
) -> None:
    """A WebSocket client's turn is drawn in the terminal attached to the session; the
    terminal's turn reaches both WebSocket clients; both clients receive the same events in
    the same order, which is the stored stream; each turn is admitted once, by uid:N."""
    handle = gateway.start()
    writer = handle.connect("tui")
    watcher = handle.connect("desktop")
    created = writer.call("session.create", {"source": "tui", "title": "shared"})
    sid = created["session_id"]
    watcher.call("session.resume", {"ref": sid})
    term, drawn = _terminal(gw_env, home, "-r", sid)
    admitted = writer.call(
        "prompt.submit",
        {"session_id": sid, "submission_id": "w1", "text": "from the socket", "client_kind": "tui"},
    )
    heard: dict[str, list[dict[str, Any]]] = {"writer": [], "watcher": []}
    writer.wait_turn(sid, admitted["turn"], on_event=heard["writer"].append, timeout=30)
    watcher.wait_turn(sid, admitted["turn"], on_event=heard["watcher"].append, timeout=30)
    term.expect_exact('you said "from the socket"')  # the terminal draws the other's turn
    term.sendline("from the terminal")
    term.expect_exact('you said "from the terminal"')
    term.expect_exact(PROMPT)
    for name, conn in (("writer", writer), ("watcher", watcher)):
        conn.wait_turn(sid, admitted["turn"] + 1, on_event=heard[name].append, timeout=30)
    term.sendline("/exit")
    term.expect(pexpect.EOF)
    with writer:
        stored = writer.call("events.since", {"session_id": sid, "last_sequence": 0})["events"]
    watcher.close()
    live = [e for e in stored if e["sequence"] > created["live_after"]]
    assert heard["writer"] == heard["watcher"]  # one stream, one order, for every client
    assert heard["writer"] == live[: len(heard["writer"])]
    admissions = [e for e in stored if e["type"] == "hermes.turn.admitted"]
    assert [(e["event"]["text"], e["event"]["client_kind"]) for e in admissions] == [
        ("from the socket", "tui"),
        ("from the terminal", "cli"),
    ]
    assert {e["actor"] for e in admissions} == {f"uid:{os.getuid()}"}
    finished = [e["event"]["outcome"] for e in stored if e["type"] == "hermes.turn.finished"]
    assert finished == ["completed", "completed"]
    assert drawn.getvalue().count('you said "from the socket"') == 1
    assert gateway.terminate() == 0


def test_a_killed_terminal_is_reaped_after_the_grace_unless_its_user_comes_back(
    home: Path, gateway: GatewayProcess, gw_env: dict[str, str]
) -> None:
    """``kill -9`` of an interactive ``hermes`` leaves its session open until the grace runs
    out, then it ends ``ws_orphan_reap``; a session whose killed terminal is followed within
    the grace by ``hermes -r ID`` stays open, and ends as that chat leaves it."""
    write_config(home, "sessions:\n  orphan_end_grace_s: 10\n")
    gateway.start()
    ids: list[str] = []
    killed: list[float] = []
    for text in ("reaped later", "kept by a return"):
        term, _ = _terminal(gw_env, home)
        term.sendline(text)
        term.expect_exact(f'you said "{text}"')
        term.expect_exact(PROMPT)
        with SessionEngine(home / "state.db") as engine:
            rows = engine.store.connection().execute(
                "SELECT id FROM sessions ORDER BY started_at, id"
            )
            ids = [str(r[0]) for r in rows.fetchall()]
        term.kill(signal.SIGKILL)  # the terminal dies: no session.close, no detach
        killed.append(time.monotonic())
        term.close(force=True)
    reaped, kept = ids
    back, _ = _terminal(gw_env, home, "-r", kept)  # within the 10 s grace
    assert _until(lambda: _state(home, reaped).ended)
    assert time.monotonic() - killed[0] >= 9.5  # not before the grace ran out
    assert _state(home, reaped).end_reason == "ws_orphan_reap"
    time.sleep(max(0.0, killed[1] + 11 - time.monotonic()))
    assert not _state(home, kept).ended  # its user came back within the grace
    back.sendline("/exit")
    back.expect(pexpect.EOF)
    assert _until(lambda: _state(home, kept).ended)
    assert _state(home, kept).end_reason == "user_exit"
    assert _state(home, reaped).message_count == 2  # ending removed nothing
    assert gateway.terminate() == 0
