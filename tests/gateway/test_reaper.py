"""Orphan reaping through a real gateway process with small grace values, and the startup sweep."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from hermes_es.commands import turns
from hermes_es.commands.engine import SessionEngine
from hermes_es.gateway.client import GatewayHandle
from hermes_es.gateway.reaper import STARTUP_MIN_IDLE_S
from tests.gateway.conftest import GatewayProcess, SlowModel, model_config, write_config

GRACE = "sessions:\n  orphan_end_grace_s: 1\n"


def _state(home: Path, sid: str) -> Any:
    with SessionEngine(home / "state.db") as engine:
        return engine.get(sid)


def _orphan(handle: GatewayHandle, **create: Any) -> str:
    """Create a session on a connection, then drop the connection without closing it."""
    conn = handle.connect()
    sid: str = conn.call("session.create", create)["session_id"]
    conn.close()
    return sid


def _until(predicate: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_dropped_viewer_is_reaped_after_grace_unless_it_returns(
    home: Path, gateway: GatewayProcess
) -> None:
    """A dropped viewer's session ends with ws_orphan_reap; one that reattaches stays open."""
    write_config(home, GRACE)
    handle = gateway.start()
    reaped = _orphan(handle)
    kept = _orphan(handle)
    with handle.connect() as back:
        back.call("session.resume", {"ref": kept})
        assert _until(lambda: _state(home, reaped).ended)
        assert _state(home, reaped).end_reason == "ws_orphan_reap"
        time.sleep(1.5)
        assert not _state(home, kept).ended  # its viewer came back within the grace
        closed = back.call("session.create", {})["session_id"]
        back.call("session.detach", {"session_id": closed})
    time.sleep(2)
    assert not _state(home, closed).ended  # a deliberate detach is not an orphan
    assert _until(lambda: _state(home, kept).ended)  # dropped again: reaped this time
    gateway.terminate()


def test_running_turn_finishes_first_and_unknown_turn_keeps_it_open(
    home: Path, gateway: GatewayProcess, slow_model: SlowModel
) -> None:
    """An orphan with a running turn is reaped after it finishes; an unknown one after resolve."""
    with SessionEngine(home / "state.db", actor="uid:0") as engine:
        paused = engine.start_session("cli")
        turns.admit(engine, paused, submission_id="p", client_kind="cli", text="lost")
        turns.start_next(engine, paused, epoch=0)  # started by an "earlier gateway"
    write_config(home, model_config(slow_model, GRACE))
    handle = gateway.start()
    assert _state(home, paused).turn_state == "unknown"
    conn = handle.connect()
    busy = conn.call("session.create", {})["session_id"]
    conn.call("prompt.submit", {"session_id": busy, "submission_id": "s", "text": "SLOW hold"})
    conn.call("session.resume", {"ref": paused})
    assert slow_model.arrived.wait(30)
    conn.close()
    time.sleep(2.5)
    assert not _state(home, busy).ended and not _state(home, paused).ended
    slow_model.release.set()
    assert _until(lambda: _state(home, busy).ended)
    assert _state(home, busy).message_count == 2  # the turn was stored, then the reap
    assert not _state(home, paused).ended
    handle.http_call("turn.resolve", {"session": paused})
    assert _until(lambda: _state(home, paused).ended)
    assert _state(home, paused).end_reason == "ws_orphan_reap"
    gateway.terminate()


def test_startup_sweep_ends_only_local_sessions_idle_six_hours(
    home: Path, gateway: GatewayProcess
) -> None:
    """After a restart: open local sessions idle ≥ 6 h end (startup_orphan_reap); others stay."""
    now = time.time()
    with SessionEngine(home / "state.db", clock=lambda: now - 7 * 3600) as old:
        stale = old.start_session("cli")
        platform = old.start_session("telegram", platform="telegram", chat_id="c1")
        ended = old.start_session("cli")
        old.end_session(ended, "user_exit")
    with SessionEngine(home / "state.db", clock=lambda: now - 3600) as recent:
        fresh = recent.start_session("cli")
    gateway.start()
    assert _until(lambda: _state(home, stale).ended)
    assert _state(home, stale).end_reason == "startup_orphan_reap"
    assert not _state(home, fresh).ended and not _state(home, platform).ended
    assert _state(home, ended).end_reason == "user_exit"
    gateway.terminate()


def test_reaping_and_sweep_can_be_turned_off(home: Path, gateway: GatewayProcess) -> None:
    """``dashboard.ws_orphan_reap_grace_s: 0`` and ``startup_orphan_sweep: false`` switch off."""
    now = time.time()
    with SessionEngine(home / "state.db", clock=lambda: now - 7 * 3600) as old:
        stale = old.start_session("cli")
    write_config(
        home, GRACE + "dashboard:\n  ws_orphan_reap_grace_s: 0\n  startup_orphan_sweep: false\n"
    )
    handle = gateway.start()
    orphan = _orphan(handle)
    time.sleep(2.5)
    assert not _state(home, orphan).ended and not _state(home, stale).ended
    gateway.terminate()


def test_startup_sweep_ends_a_recent_leftover_once_it_has_been_idle_six_hours(
    home: Path, gateway: GatewayProcess
) -> None:
    """A local session the last run left open, active less than 6 h ago, is ended
    ``startup_orphan_reap`` when its 6 hours are up (not at start-up), unless a viewer came
    back to it; one paused on an unknown turn and one an embedded process holds stay open
    however old."""
    from hermes_es.commands.holders import register_holder

    now = time.time()
    almost = now - STARTUP_MIN_IDLE_S + 10  # its 6 hours are up 10 s from now (after start-up)
    with SessionEngine(home / "state.db", clock=lambda: almost) as recent:
        leftover = recent.start_session("cli")
        recent.append_message(leftover, "user", "left open by the last run")
        returned = recent.start_session("tui")
    with SessionEngine(home / "state.db", actor="uid:0", clock=lambda: now - 7 * 3600) as old:
        paused = old.start_session("cli")
        turns.admit(old, paused, submission_id="p", client_kind="cli", text="lost")
        turns.start_next(old, paused, epoch=0)  # started by an "earlier gateway"
        held = old.start_session("cli")
    with register_holder(home / "state.db", "chat", held):  # an embedded chat has it open
        handle = gateway.start()
        assert not _state(home, leftover).ended  # its 6 hours are not up yet
        with handle.connect() as back:
            back.call("session.resume", {"ref": returned})
            assert _until(lambda: _state(home, leftover).ended, timeout=40)
            assert _state(home, leftover).end_reason == "startup_orphan_reap"
            assert time.time() >= almost + STARTUP_MIN_IDLE_S  # not sooner
            time.sleep(1)
            assert not _state(home, returned).ended  # its viewer came back
            back.call("session.detach", {"session_id": returned})
        time.sleep(1)
        assert not _state(home, paused).ended and not _state(home, held).ended
        assert not _state(home, returned).ended  # detached on purpose: no orphan
    gateway.terminate()
    again = SessionEngine(home / "state.db")
    try:
        assert again.get(leftover).message_count == 1  # ending removed nothing
    finally:
        again.close()
