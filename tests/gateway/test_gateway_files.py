"""The gateway's files left behind by a crash, and the lifecycle commands' refusals, through the
real ``hermes`` program: a pid in a stale ``gateway.json`` or ``gateway.pid`` that another
process has now is never taken for the gateway (nor signalled); a second ``gateway run`` names
the first and the command that stops it; an HTTP call with a bad ticket is refused naming why
and changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.gateway.paths import GatewayPaths, gateway_runs, lock_holder
from tests.gateway.conftest import ENTRY, GatewayProcess, hermes


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that is not a gateway (its pid is what a stale file names)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait(10)


def _stale_files(home: Path, pid: int) -> None:
    """What a gateway killed with SIGKILL leaves, its pid now another process's."""
    endpoint = {
        "host": "127.0.0.1",
        "port": 9,
        "pid": pid,
        "instance_id": "gone",
        "epoch": 1,
        "profile": "default",
        "started_at": 0.0,
    }
    (home / "gateway.json").write_text(json.dumps(endpoint), encoding="utf-8")
    (home / "gateway.pid").write_text(f"{pid}\n", encoding="utf-8")
    (home / "gateway.lock").touch()
    (home / "gateway.sock").touch()


def test_a_stale_pid_is_not_the_gateway_and_is_never_signalled(
    home: Path, gw_env: dict[str, str], bystander: subprocess.Popen[bytes]
) -> None:
    """stop, status, the CLI and ensure see through a stale gateway.json/gateway.pid whose pid
    is alive: stop signals nothing, status says none runs, ``-q`` runs embedded, ensure starts
    a real gateway (and stop then stops that one)."""
    _stale_files(home, bystander.pid)
    paths = GatewayPaths(home)
    assert lock_holder(paths) == 0 and not gateway_runs(paths, bystander.pid)
    stopped = hermes(gw_env, "gateway", "stop", "--timeout", "2")
    assert (stopped.returncode, stopped.stdout.strip()) == (0, "no gateway running")
    assert bystander.poll() is None  # not signalled
    assert json.loads(hermes(gw_env, "gateway", "status", "--json").stdout) == {"running": False}
    embedded = hermes(gw_env, "-q", "while none runs")
    assert embedded.returncode == 0, embedded.stderr
    with SessionEngine(home / "state.db") as engine:
        [(sid,)] = engine.store.connection().execute("SELECT id FROM sessions").fetchall()
        assert engine.get(sid).message_count == 2
    ensured = hermes(gw_env, "gateway", "ensure", "--json")
    assert ensured.returncode == 0, ensured.stderr
    info = json.loads(ensured.stdout)
    try:
        assert info["started"] is True and info["pid"] != bystander.pid
        assert lock_holder(paths) == info["pid"]
    finally:
        stopped = hermes(gw_env, "gateway", "stop")
    assert stopped.stdout.strip() == f"gateway stopped (pid {info['pid']})"
    assert bystander.poll() is None
    assert not (home / "gateway.json").exists() and not (home / "gateway.pid").exists()


def test_a_second_run_names_the_first_and_how_to_stop_it(
    home: Path, gw_env: dict[str, str]
) -> None:
    """``gateway run`` beside a running gateway of the same profile exits 1 naming its pid and
    the stop command of that profile, without a traceback, and leaves the first one as it
    was; ``gateway start`` says it already runs."""
    started = hermes(gw_env, "gateway", "start", "-p", "work", "--json")
    assert started.returncode == 0, started.stderr
    first = json.loads(started.stdout)
    published = (home / "profiles" / "work" / "gateway.json").read_bytes()
    try:
        second = hermes(gw_env, "-p", "work", "gateway", "run")
        assert second.returncode == 1
        assert f"pid {first['pid']}" in second.stderr
        assert "'hermes -p work gateway stop' stops it" in second.stderr
        assert "Traceback" not in second.stderr
        assert (home / "profiles" / "work" / "gateway.json").read_bytes() == published
        again = hermes(gw_env, "gateway", "start", "-p", "work")
        assert again.returncode == 0
        assert f"gateway already running: pid {first['pid']}" in again.stdout
    finally:
        stopped = hermes(gw_env, "gateway", "stop", "-p", "work")
    assert stopped.stdout.strip() == f"gateway stopped (pid {first['pid']})"


def test_http_calls_without_a_valid_native_http_ticket_are_refused_naming_why(
    home: Path, gateway: GatewayProcess
) -> None:
    """``POST /rpc`` with no ticket, an unknown one, a used one or an interactive one is 401
    with the reason, and the mutation it carried is not made."""
    handle = gateway.start()
    with handle.connect() as conn:
        sid = conn.call("session.create", {"title": "kept"})["session_id"]
    url = f"{handle.endpoint.http_url}/rpc"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "session.rename",
        "params": {"session_id": sid, "title": "changed"},
    }
    used = handle.ticket("native-http")
    assert httpx.post(url, json=body, headers={"Authorization": f"Bearer {used}"}).status_code == (
        200
    )
    body["params"] = {"session_id": sid, "title": "changed again"}
    for header, reason in (
        ({}, "no ticket"),
        ({"Authorization": "Bearer not-a-ticket"}, "unknown or already used ticket"),
        ({"Authorization": f"Bearer {used}"}, "unknown or already used ticket"),
        (
            {"Authorization": f"Bearer {handle.ticket('interactive')}"},
            "ticket minted for 'interactive', not for native-http",
        ),
    ):
        refused = httpx.post(url, json=body, headers=header)
        assert refused.status_code == 401, header
        assert reason in refused.json()["error"]
    assert gateway.terminate() == 0
    with SessionEngine(home / "state.db") as engine:
        assert engine.get(sid).title == "changed"


def test_the_lock_table_names_the_holder_not_a_waiter_or_another_lock(tmp_path: Path) -> None:
    """``lock_holder`` reads the flock holding the lock file's inode: a waiter's line and a
    lock on another inode are not it; on another device (an overlay) it still counts; an
    unreadable table is "cannot tell" (None)."""
    paths = GatewayPaths(tmp_path)
    assert lock_holder(paths) == 0  # no lock file: no gateway ever ran here
    paths.lock.touch()
    stat = os.stat(paths.lock)
    dev = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}"
    table = tmp_path / "locks"
    table.write_text(
        f"1: POSIX  ADVISORY  WRITE 11 {dev}:{stat.st_ino} 0 EOF\n"
        f"2: FLOCK  ADVISORY  WRITE 12 {dev}:{stat.st_ino + 1} 0 EOF\n"
        f"3: FLOCK  ADVISORY  WRITE 13 {dev}:{stat.st_ino} 0 EOF\n"
        f"3: -> FLOCK  ADVISORY  WRITE 14 {dev}:{stat.st_ino} 0 EOF\n",
        encoding="ascii",
    )
    assert lock_holder(paths, table=table) == 13
    table.write_text(f"1: FLOCK  ADVISORY  WRITE 15 00:99:{stat.st_ino} 0 EOF\n", "ascii")
    assert lock_holder(paths, table=table) == 15
    table.write_text(f"1: FLOCK  ADVISORY  WRITE 16 {dev}:{stat.st_ino + 1} 0 EOF\n", "ascii")
    assert lock_holder(paths, table=table) == 0
    assert lock_holder(paths, table=tmp_path / "missing") is None


def test_a_bad_setting_stops_the_start_naming_it_and_leaves_no_gateway_files(
    home: Path, gw_env: dict[str, str]
) -> None:
    """``gateway run`` and ``gateway start`` with an invalid orphan setting exit 1 naming the
    file and the field, without a traceback, and leave no gateway.json, pid or socket."""
    (home / "config.yaml").write_text("sessions:\n  orphan_end_grace_s: -1\n", encoding="utf-8")
    for args in (("gateway", "run"), ("gateway", "start")):
        refused = hermes(gw_env, *args)
        assert refused.returncode == 1, args
        assert "config.yaml" in refused.stderr, args
        assert "$.sessions.orphan_end_grace_s" in refused.stderr, args
        assert "Traceback" not in refused.stderr, args
        for name in ("gateway.json", "gateway.pid", "gateway.sock"):
            assert not (home / name).exists(), (args, name)


def test_a_running_gateway_whose_socket_is_gone_is_not_written_beside(
    home: Path, gateway: GatewayProcess, gw_env: dict[str, str]
) -> None:
    """With the control socket of a running gateway removed, ``hermes -q`` and a maintenance
    command exit 1 naming the socket and how to restart, write nothing (they do not fall
    back to writing the store embedded beside the gateway), and ``status`` says what is
    wrong; with the socket back, the CLI attaches again."""
    handle = gateway.start()
    with handle.connect() as conn:
        sid = conn.call("session.create", {"title": "kept"})["session_id"]
    before = _versions(home)
    moved = home / "moved.sock"
    os.rename(home / "gateway.sock", moved)
    try:
        for args in (("-q", "nowhere to go"), ("sessions", "rename", sid, "changed")):
            refused = hermes(gw_env, *args)
            assert refused.returncode == 1, args
            assert f"control socket {home / 'gateway.sock'} is missing" in refused.stderr
            assert "hermes gateway stop, then hermes gateway start" in refused.stderr
            assert "Traceback" not in refused.stderr
        status = hermes(gw_env, "gateway", "status")
        assert f"gateway running: pid {handle.endpoint.pid}" in status.stdout
        assert "warning: it does not answer" in status.stdout
        assert _versions(home) == before
    finally:
        os.rename(moved, home / "gateway.sock")
    again = hermes(gw_env, "-r", sid, "-q", "back")
    assert again.returncode == 0, again.stderr
    assert gateway.terminate() == 0
    with SessionEngine(home / "state.db") as engine:
        state = engine.get(sid)
        assert (state.title, state.message_count) == ("kept", 2)


def _versions(home: Path) -> list[tuple[str, int]]:
    with SessionEngine(home / "state.db") as engine:
        rows = engine.store.connection().execute("SELECT id, version FROM sessions ORDER BY id")
        return [(str(r[0]), int(r[1])) for r in rows.fetchall()]


def test_concurrent_ensures_share_one_gateway(home: Path, gw_env: dict[str, str]) -> None:
    """Three ``gateway ensure --json`` at once all exit 0 naming one gateway: one started it,
    the others (whose own start lost the profile's lock) report it already running."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ENTRY, "gateway", "ensure", "--json"],
            env=gw_env,
            cwd=home,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [proc.communicate(timeout=90) for proc in procs]
    try:
        assert [proc.returncode for proc in procs] == [0, 0, 0], outputs
        infos = [json.loads(out) for out, _ in outputs]
        assert len({info["pid"] for info in infos}) == 1
        assert sorted(info["started"] for info in infos)[-1] is True
    finally:
        stopped = hermes(gw_env, "gateway", "stop")
    assert stopped.stdout.startswith("gateway stopped")


HOLD_LOCK = """
import fcntl, sys, time
handle = open(sys.argv[1], "a+")
fcntl.flock(handle, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _hold_lock(home: Path, seconds: float) -> subprocess.Popen[str]:
    """A process holding the profile's gateway lock without publishing gateway.json (what a
    gateway does while it recovers), for ``seconds``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(home / "gateway.lock"), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_the_cli_waits_for_a_gateway_that_holds_the_profile_but_is_not_ready(
    home: Path, gw_env: dict[str, str]
) -> None:
    """While a process holds the profile's lock without a gateway.json naming it (a gateway
    starting), ``hermes -q`` waits instead of writing the store beside it, and runs embedded
    once the lock is free; a caller that gives up after its wait gets an error naming the
    pid."""
    from hermes_es.gateway.client import GatewayError, running_gateway

    holder = _hold_lock(home, 3.0)
    try:
        with pytest.raises(GatewayError, match=f"pid {holder.pid}.* did not become ready"):
            running_gateway(home, starting_wait=0.3)
        assert running_gateway(home) is None  # without a wait: none is ready
        began = time.monotonic()
        ran = hermes(gw_env, "-q", "after the start")
        waited = time.monotonic() - began
    finally:
        holder.kill()
        holder.communicate(timeout=10)
    assert ran.returncode == 0, ran.stderr
    assert waited >= 2.0, f"it ran after {waited:.1f} s, while the lock was held"
    with SessionEngine(home / "state.db") as engine:
        [(sid,)] = engine.store.connection().execute("SELECT id FROM sessions").fetchall()
        assert engine.get(sid).message_count == 2
