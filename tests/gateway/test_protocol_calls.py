"""Protocol calls of a real gateway process over a real WebSocket: cancelling a queued turn
(its attached clients see it finish ``cancelled``, the turns around it run, the model never
sees it), and the session mutations with an expected version (a current one applies, a stale
one is 4090 with both versions and changes nothing; a delete while a turn runs is 4009)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.gateway.client import GatewayError
from tests.gateway.conftest import GatewayProcess, SlowModel, model_config, write_config


def _submit(conn: Any, sid: str, sub: str, text: str) -> int:
    admitted = conn.call("prompt.submit", {"session_id": sid, "submission_id": sub, "text": text})
    return int(admitted["turn"])


def test_cancel_a_queued_turn_the_others_run_and_every_client_sees_it(
    home: Path, gateway: GatewayProcess, slow_model: SlowModel
) -> None:
    """Turn 2 queued behind a running turn 1 is cancelled: its ``turn.finished`` says
    ``cancelled`` on every attached client, turn 3 runs after turn 1, the model never gets
    turn 2's text; a second cancel of it and a cancel of the running turn are 4009."""
    write_config(home, model_config(slow_model))
    handle = gateway.start()
    conn = handle.connect()
    watcher = handle.connect("tui")
    sid = conn.call("session.create", {})["session_id"]
    watcher.call("session.resume", {"ref": sid})
    first = _submit(conn, sid, "c1", "SLOW first")
    assert slow_model.arrived.wait(30)
    second = _submit(conn, sid, "c2", "never sent")
    third = _submit(conn, sid, "c3", "third")
    cancelled = conn.call("turn.cancel", {"session_id": sid, "turn": second})
    assert cancelled == {"session_id": sid, "turn": second, "queued": [third]}
    for turn in (second, first):
        with pytest.raises(GatewayError) as refused:
            conn.call("turn.cancel", {"session_id": sid, "turn": turn})
        assert refused.value.code == 4009
    seen: list[dict[str, Any]] = []
    slow_model.release.set()
    watcher.wait_turn(sid, third, on_event=seen.append, timeout=30)
    outcomes = [
        (e["event"]["turn"], e["event"]["outcome"])
        for e in seen
        if e["type"] == "hermes.turn.finished"
    ]
    assert outcomes == [(second, "cancelled"), (first, "completed"), (third, "completed")]
    started = [e["event"]["turn"] for e in seen if e["type"] == "hermes.turn.started"]
    assert started == [first, third]  # turn 2 never started
    assert slow_model.count("never sent") == 0 and slow_model.count("third") == 1
    conn.close()
    watcher.close()
    assert gateway.terminate() == 0
    with SessionEngine(home / "state.db") as engine:
        assert engine.get(sid).message_count == 4  # turns 1 and 3, a prompt and a reply each


def test_mutations_apply_at_the_expected_version_and_refuse_a_stale_one(
    home: Path, gateway: GatewayProcess, slow_model: SlowModel
) -> None:
    """rename, pin, archive and delete with the current version apply and answer the new
    one; with a stale version each is 4090 naming both versions and nothing changes; a delete
    while a turn runs is 4009 and the session stays."""
    write_config(home, model_config(slow_model))
    handle = gateway.start()
    with handle.connect() as conn:
        sid = conn.call("session.create", {"title": "before"})["session_id"]
        version = conn.call("session.resume", {"ref": sid})["version"]
        renamed = conn.call(
            "session.rename", {"session_id": sid, "title": "after", "expected_version": version}
        )
        assert renamed["title"] == "after" and renamed["version"] > version
        pinned = conn.call(
            "session.pin", {"session_id": sid, "expected_version": renamed["version"]}
        )
        assert pinned["version"] > renamed["version"]
        for method, params in (
            ("session.rename", {"title": "stale"}),
            ("session.pin", {"pinned": False}),
            ("session.archive", {}),
            ("session.delete", {}),
        ):
            with pytest.raises(GatewayError) as stale:
                conn.call(method, {"session_id": sid, "expected_version": version, **params})
            assert stale.value.code == 4090, method
            assert stale.value.data == {"expected": version, "actual": pinned["version"]}
        now = conn.call("session.resume", {"ref": sid})
        assert (now["version"], now["title"]) == (pinned["version"], "after")
        archived = conn.call(
            "session.archive", {"session_id": sid, "expected_version": pinned["version"]}
        )
        busy = conn.call("session.create", {})["session_id"]
        _submit(conn, busy, "b1", "SLOW busy")
        assert slow_model.arrived.wait(30)
        with pytest.raises(GatewayError) as running:
            conn.call("session.delete", {"session_id": busy})
        assert running.value.code == 4009
        slow_model.release.set()
        deleted = conn.call(
            "session.delete", {"session_id": sid, "expected_version": archived["version"]}
        )
        assert deleted["deleted"] == [sid]
        with pytest.raises(GatewayError) as gone:
            conn.call("events.since", {"session_id": sid})
        assert gone.value.code == 4004
    assert gateway.terminate() == 0
    with SessionEngine(home / "state.db") as engine:
        ids = [r[0] for r in engine.store.connection().execute("SELECT id FROM sessions")]
        assert ids == [busy]
        state = engine.get(busy)
        assert state.message_count == 2 and state.turn_state == ""
