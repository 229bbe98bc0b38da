"""Holder registry: real second processes hold state.db; crashed holders never block."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_es.commands.holders import (
    holders_dir,
    live_holders,
    process_start_time,
    register_holder,
    require_no_holders,
)
from hermes_es.errors import HolderError

HOLD = """
import sys, time
from hermes_es.commands.holders import register_holder
with register_holder(sys.argv[1], sys.argv[2], sys.argv[3] or None):
    print("ready", flush=True)
    time.sleep(60)
"""


def spawn_holder(db: Path, kind: str = "chat", session: str = "") -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db), kind, session],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_second_process_blocks_until_killed(tmp_path: Path) -> None:
    """A live holder in another process refuses; after kill -9 its stale lease no longer does."""
    db = tmp_path / "state.db"
    proc = spawn_holder(db, "chat", "sess-1")
    try:
        holders = live_holders(db)
        assert [(h.pid, h.kind, h.session_id) for h in holders] == [(proc.pid, "chat", "sess-1")]
        with pytest.raises(HolderError, match=rf"pid {proc.pid} \(chat, session sess-1\)"):
            require_no_holders(db, "optimize")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    assert list(holders_dir(db).glob("*.json")), "a crash leaves its lease behind"
    assert live_holders(db) == []
    require_no_holders(db, "optimize")
    assert list(holders_dir(db).glob("*.json")) == [], "stale leases are removed when read"


def test_reused_pid_does_not_count(tmp_path: Path) -> None:
    """A lease whose pid is alive but started at another time (pid reuse) is stale."""
    db = tmp_path / "state.db"
    holders_dir(db).mkdir()
    start = process_start_time(os.getpid())
    if start is None:
        pytest.skip("no /proc on this platform")
    lease = {
        "pid": os.getppid(),
        "kind": "chat",
        "started_at": time.time(),
        "host": os.uname().nodename,
        "proc_start": 1,
    }
    (holders_dir(db) / f"{os.getppid()}.json").write_text(json.dumps(lease))
    assert live_holders(db) == []


def test_own_registration_is_listed_and_removed_on_exit(tmp_path: Path) -> None:
    """register_holder writes a lease while the block runs and removes it after."""
    db = tmp_path / "state.db"
    with register_holder(db, "dashboard") as me, register_holder(db, "chat", "s2") as second:
        assert me.path != second.path
        assert {h.kind for h in live_holders(db)} == {"dashboard", "chat"}
        assert live_holders(db, exclude_self=True) == []
    assert live_holders(db) == []


def test_register_needs_a_kind(tmp_path: Path) -> None:
    """An empty kind is refused."""
    with pytest.raises(HolderError), register_holder(tmp_path / "state.db", ""):
        pass


def test_exited_but_uncollected_holder_does_not_block(tmp_path: Path) -> None:
    """A holder that exited but whose parent has not reaped it yet (a zombie) is not live."""
    db = tmp_path / "state.db"
    proc = spawn_holder(db)
    assert live_holders(db)
    os.kill(proc.pid, signal.SIGKILL)
    deadline = time.time() + 20
    while Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[1][0] != "Z":
        assert time.time() < deadline
        time.sleep(0.05)
    assert live_holders(db) == []  # still unreaped here: only its zombie entry exists
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()
