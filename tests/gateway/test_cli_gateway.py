"""The CLI through a running gateway: one-shot, continue, two terminals, a drop mid-turn, and
maintenance (prune, rename, pin, archive, delete) sent to the gateway."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pexpect

from hermes_es.commands.engine import SessionEngine
from hermes_es.queries.history import session_history
from tests.gateway.conftest import (
    ENTRY,
    GatewayProcess,
    SlowModel,
    hermes,
    model_config,
    write_config,
)


def _history(home: Path, sid: str) -> list[tuple[str, str]]:
    with SessionEngine(home / "state.db") as engine:
        return [(e.actor, e.summary) for e in session_history(engine.store.connection(), sid)]


def _only_session(home: Path) -> str:
    conn_engine = SessionEngine(home / "state.db")
    try:
        rows = conn_engine.store.connection().execute("SELECT id FROM sessions").fetchall()
    finally:
        conn_engine.close()
    assert len(rows) == 1
    return str(rows[0][0])


def test_oneshot_and_continue_go_through_the_gateway(
    home: Path, gateway: GatewayProcess, gw_env: dict[str, str]
) -> None:
    """``hermes -q`` and ``hermes -c -q`` are admitted turns of the gateway, acted by uid:N."""
    gateway.start()
    first = hermes(gw_env, "-q", "hello through the gateway")
    assert first.returncode == 0, first.stderr
    assert 'you said "hello through the gateway"' in first.stdout
    sid = _only_session(home)
    again = hermes(gw_env, "-c", "-q", "and again")
    assert again.returncode == 0 and "and again" in again.stdout
    assert _only_session(home) == sid
    lines = _history(home, sid)
    actor = f"uid:{os.getuid()}"
    assert (actor, "turn 1 admitted from cli: hello through the gateway") in lines
    assert (actor, "turn 2 admitted from cli: and again") in lines
    assert lines[-1] == (actor, "ended (run_complete)")
    assert gateway.terminate() == 0


def test_two_terminals_share_one_session(
    home: Path, gateway: GatewayProcess, gw_env: dict[str, str]
) -> None:
    """Two interactive hermes on one session both stay attached and see each other's turns."""
    gateway.start()
    assert hermes(gw_env, "--source", "cli", "-q", "seed").returncode == 0
    sid = _only_session(home)

    def terminal() -> pexpect.spawn:
        child = pexpect.spawn(
            sys.executable,
            ["-c", ENTRY, "-r", sid],
            env=gw_env,
            cwd=str(home),
            encoding="utf-8",
            timeout=30,
            dimensions=(50, 200),
        )
        child.expect_exact("› ")
        return child

    one, two = terminal(), terminal()
    one.sendline("from terminal one")
    one.expect_exact('you said "from terminal one"')
    two.expect_exact("from terminal one")  # the other terminal sees the prompt and the reply
    two.expect_exact('you said "from terminal one"')
    two.sendline("from terminal two")
    one.expect_exact('you said "from terminal two"')
    for child in (one, two):
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    lines = _history(home, sid)
    assert sum(1 for _, s in lines if "admitted from cli" in s) == 3
    assert gateway.terminate() == 0


def test_drop_mid_turn_says_the_outcome_is_stored(
    home: Path, gateway: GatewayProcess, gw_env: dict[str, str], slow_model: SlowModel
) -> None:
    """When the gateway dies mid-turn the CLI says how to resume and never to resend."""
    write_config(home, model_config(slow_model))
    gateway.start()
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "-q", "SLOW please"],
        env=gw_env,
        cwd=home,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert slow_model.arrived.wait(30)
    gateway.kill9()
    _, stderr = proc.communicate(timeout=30)
    sid = _only_session(home)
    assert proc.returncode == 1
    assert "the gateway keeps it and stores the outcome" in stderr
    assert f"hermes --resume {sid}" in stderr and "again" not in stderr.lower()
    gateway.start()
    shown = hermes(gw_env, "sessions", "show", sid)
    assert f"hermes sessions resolve {sid} --discard" in shown.stderr
    resolved = hermes(gw_env, "sessions", "resolve", sid, "--discard")
    assert resolved.returncode == 0 and "via the gateway" in resolved.stdout
    assert gateway.terminate() == 0


def test_maintenance_goes_through_the_gateway(
    home: Path, gateway: GatewayProcess, gw_env: dict[str, str]
) -> None:
    """prune/rename/pin/archive/delete are sent to the gateway; optimize refuses while it runs."""
    old_clock = time.time() - 90 * 86400
    with SessionEngine(home / "state.db", clock=lambda: old_clock) as engine:
        old = engine.start_session("cli")
        engine.append_message(old, "user", "ancient")
        engine.end_session(old, "user_exit")
        pinned = engine.start_session("cli")
        engine.append_message(pinned, "user", "keep me")
        engine.end_session(pinned, "user_exit")
    with SessionEngine(home / "state.db") as engine:
        live = engine.start_session("cli", title="live one")
        engine.append_message(live, "user", "current")
    gateway.start()
    pin = hermes(gw_env, "sessions", "pin", pinned)
    assert pin.returncode == 0 and f"pinned {pinned}" in pin.stdout
    pruned = hermes(gw_env, "sessions", "prune", "--older-than", "30d", "--yes")
    assert pruned.returncode == 0, pruned.stderr
    assert "deleted 1 session(s), 1 message(s) (through the gateway)" in pruned.stdout
    renamed = hermes(gw_env, "sessions", "rename", "live one", "renamed")
    assert renamed.returncode == 0 and f"{live}: title 'renamed'" in renamed.stdout
    archived = hermes(gw_env, "sessions", "archive", live)
    assert archived.returncode == 0 and f"archived {live}" in archived.stdout
    optimize = hermes(gw_env, "sessions", "optimize")
    assert optimize.returncode == 1 and "gateway" in optimize.stderr
    deleted = hermes(gw_env, "sessions", "delete", live, "--yes")
    assert deleted.returncode == 0 and f"deleted {live} (through the gateway)" in deleted.stdout
    assert gateway.terminate() == 0
    with SessionEngine(home / "state.db") as engine:
        conn = engine.store.connection()
        ids = {r[0] for r in conn.execute("SELECT id FROM sessions").fetchall()}
        receipts = conn.execute("SELECT session_id, actor FROM deletions").fetchall()
    assert ids == {pinned}
    assert sorted(receipts) == sorted([(old, f"uid:{os.getuid()}"), (live, f"uid:{os.getuid()}")])
