"""Benchmark the team gateway's takeover: SIGKILL of the owner until the standby executes.

Two ``hermes gateway run`` processes (separate HERMES_HOMEs, as on two hosts) on one
PostgreSQL database. Each round SIGKILLs the owner and times until the standby's
``gateway.json`` says ``owner`` (it has taken the lock, begun the new epoch and recovered), then
starts a fresh gateway as the next standby. Reported: median, min and max of the rounds, and the
standby's own figure (lock free → executing, from ``gateway.status``'s ``took_over_ms``).

Floor, in the same run: a bare advisory-lock handoff between two psycopg connections, the
holder a subprocess SIGKILLed like the owner, the waiter blocked in ``pg_advisory_lock``: time
from the kill until the waiter holds the lock.

The server is a temporary cluster started like the tests' (``tests/pg_server.py``) unless
``--url`` names an empty database.

Run: ``python -m bench.bench_team_gateway [--quick] [--rounds N]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import emit, log, machine_info, postgres_url, ratio

BENCH = "team_gateway"
ROOT = Path(__file__).resolve().parent.parent


def _env(home: Path, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "RESET" not in k.upper()}
    env.update(HERMES_HOME=str(home), HERMES_STORE_URL=url, HERMES_RESPONDER="offline")
    env.pop("HERMES_NO_GATEWAY", None)
    return env


def _endpoint(home: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((home / "gateway.json").read_text())
    except (OSError, ValueError):
        return None
    return data


def _start(home: Path, url: str, role: str) -> subprocess.Popen[bytes]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "gateway.json").unlink(missing_ok=True)
    log_file = open(home / "gateway-bench.log", "ab")  # noqa: SIM115 (the child keeps it)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from hermes_es.cli import main; main()", "gateway", "run"],
        env=_env(home, url),
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=log_file,
        cwd=ROOT,
    )
    log_file.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        info = _endpoint(home)
        if info is not None and info.get("pid") == proc.pid and info.get("role") == role:
            return proc
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited: {(home / 'gateway-bench.log').read_text()}")
        time.sleep(0.02)
    raise RuntimeError(f"gateway not {role} in time")


def _took_over_ms(home: Path) -> float | None:
    from hermes_es.gateway.client import running_gateway

    handle = running_gateway(home)
    if handle is None:
        return None
    status = handle.http_call("gateway.status", {}, timeout=10)
    value = status.get("took_over_ms")
    return float(value) if value is not None else None


def bench_takeover(url: str, tmp: Path, rounds: int) -> list[float]:
    """Kill the owner ``rounds`` times; seconds from each kill until the standby owns."""
    homes = [tmp / f"host-{i}" for i in range(rounds + 2)]
    owner = _start(homes[0], url, "owner")
    standby = _start(homes[1], url, "standby")
    owner_home, standby_home = homes[0], homes[1]
    times: list[float] = []
    inner: list[float] = []
    try:
        for n in range(rounds):
            killed = time.monotonic()
            owner.kill()
            while True:
                info = _endpoint(standby_home)
                if info is not None and info.get("role") == "owner":
                    break
                if time.monotonic() - killed > 30:
                    raise RuntimeError("no takeover within 30 s")
                time.sleep(0.002)
            times.append(time.monotonic() - killed)
            owner.wait(10)
            took = _took_over_ms(standby_home)
            if took is not None:
                inner.append(took / 1000)
            log(f"round {n + 1}: takeover {times[-1] * 1000:.0f} ms (epoch {info.get('epoch')})")
            owner, owner_home = standby, standby_home
            standby_home = homes[n + 2]
            standby = _start(standby_home, url, "standby")
    finally:
        for proc in (owner, standby):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    emit(
        BENCH,
        "standby_promote",
        unit="s",
        median=statistics.median(inner) if inner else None,
        rounds=len(inner),
        note="lock free -> new epoch begun and recovery done (the standby's own clock)",
    )
    _ = owner_home
    return times


HOLDER = """
import sys, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True)
conn.execute("SELECT pg_advisory_lock(%s, %s)", (int(sys.argv[2]), int(sys.argv[3])))
print("held", flush=True)
sys.stdin.read()
"""


def _handoff(url: str, key: tuple[int, int]) -> float:
    """One round of the floor: seconds from SIGKILL of the holder until the waiter holds."""
    import psycopg

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, str(key[0]), str(key[1])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
    acquired: list[float] = []
    ready = threading.Event()
    with psycopg.connect(url, autocommit=True) as waiter:

        def wait() -> None:
            ready.set()
            waiter.execute("SELECT pg_advisory_lock(%s, %s)", key)
            acquired.append(time.monotonic())

        thread = threading.Thread(target=wait)
        thread.start()
        ready.wait()
        time.sleep(0.3)  # the waiter is blocked on the server by now
        killed = time.monotonic()
        holder.kill()
        thread.join(30)
        holder.wait(10)
    return acquired[0] - killed


def bench_floor(url: str, rounds: int) -> list[float]:
    """A SIGKILLed psycopg holder, a psycopg waiter in ``pg_advisory_lock``: kill → acquired."""
    return [_handoff(url, (0x4E524D48, 1000 + n)) for n in range(rounds)]


def main(argv: list[str] | None = None) -> int:
    """Start (or use) a server, measure the floor and the gateway takeover, stop the server."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--url", default=None, help="an empty database to use instead")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = 3
    emit(BENCH, "machine", **machine_info())
    with postgres_url(args.url) as url:
        floor = bench_floor(url, args.rounds)
        emit(
            BENCH,
            "floor_lock_handoff",
            unit="s",
            median=statistics.median(floor),
            min=min(floor),
            max=max(floor),
            rounds=len(floor),
        )
        with tempfile.TemporaryDirectory(prefix="hermes-team-bench-") as tmp:
            times = bench_takeover(url, Path(tmp), args.rounds)
        median = statistics.median(times)
        emit(
            BENCH,
            "takeover",
            unit="s",
            median=median,
            min=min(times),
            max=max(times),
            rounds=len(times),
            floor_median=statistics.median(floor),
            ratio_to_floor=ratio(median, statistics.median(floor)),
            target_s=5.0,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
