"""Benchmark the team relay: how much later a standby's client sees the owner's streamed items.

Two ``hermes gateway run`` processes (separate HERMES_HOMEs) on one PostgreSQL database, a local
OpenAI-compatible endpoint (``tests/openai_server.py``) streaming each reply in N pieces. One
client attached to the owner, one to the standby, both in this process (a reader thread each,
timestamps from one monotonic clock). For every ``turn.stream`` item: the delay between its
arrival at the owner's client and at the standby's client (the relay: the owner's NOTIFY
thread, PostgreSQL, the standby's listener, its loop, its WebSocket). Reported: p50/p99 of that
delay, and how many items arrived at the standby out of order or twice (should be 0).

Floor, in the same run: a bare NOTIFY between two psycopg connections (``pg_notify`` committed
on one, received by a ``LISTEN`` on the other), the same number of messages, one at a time.

Run: ``python -m bench.bench_team_relay [--quick] [--turns N] [--pieces N]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import emit, machine_info, percentile, postgres_url, ratio

BENCH = "team_relay"
ROOT = Path(__file__).resolve().parent.parent


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "RESET" not in k.upper()}
    env.update(HERMES_HOME=str(home), HERMES_RESPONDER="")
    env.pop("HERMES_NO_GATEWAY", None)
    env.pop("HERMES_STORE_URL", None)
    return env


def _start(home: Path, model_url: str, url: str, role: str) -> subprocess.Popen[bytes]:
    from hermes_es.gateway.client import running_gateway

    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"model:\n  provider: openai\n  base_url: {model_url}\n  name: bench\n"
        f"  max_retries: 0\n  timeout: 30\nstore: {{url: '{url}'}}\n",
        encoding="utf-8",
    )
    log_file = open(home / "gateway-bench.log", "ab")  # noqa: SIM115 (the child keeps it)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from hermes_es.cli import main; main()", "gateway", "run"],
        env=_env(home),
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=log_file,
        cwd=ROOT,
    )
    log_file.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        handle = running_gateway(home)
        if handle is not None and handle.endpoint.pid == proc.pid and handle.endpoint.role == role:
            return proc
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited: {(home / 'gateway-bench.log').read_text()}")
        time.sleep(0.02)
    raise RuntimeError(f"gateway not {role} in time")


class _Clock:
    """Arrival times of one client's ``turn.stream`` items, by (turn, index)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[int, int], float] = {}
        self.order: list[tuple[int, int]] = []
        self.finished: dict[int, threading.Event] = {}
        self.lock = threading.Lock()

    def done(self, turn: int) -> threading.Event:
        with self.lock:
            return self.finished.setdefault(turn, threading.Event())

    def __call__(self, message: dict[str, Any]) -> None:
        now = time.monotonic()
        params = message.get("params") or {}
        if message.get("method") == "turn.stream":
            key = (int(params["turn"]), int(params["index"]))
            self.order.append(key)
            self.seen.setdefault(key, now)
        elif message.get("method") == "session.event" and params.get("type") in (
            "hermes.turn.finished",
            "hermes.turn.unknown",
        ):
            self.done(int((params.get("event") or {}).get("turn", 0))).set()


def bench_relay(url: str, tmp: Path, turns: int, pieces: int) -> tuple[list[float], int]:
    """Delays (s) owner client → standby client per streamed item; items out of order/twice."""
    from hermes_es.gateway.client import running_gateway
    from tests.openai_server import fake_model

    with fake_model(slow_delay=0.01) as model:
        owner = _start(tmp / "host-a", model.base_url, url, "owner")
        standby = _start(tmp / "host-b", model.base_url, url, "standby")
        try:
            handle_a, handle_b = running_gateway(tmp / "host-a"), running_gateway(tmp / "host-b")
            assert handle_a is not None and handle_b is not None
            conn_a, conn_b = handle_a.connect(), handle_b.connect()
            sid = conn_a.call("session.create", {"title": "relay bench"})["session_id"]
            conn_b.call("session.resume", {"ref": sid})
            clock_a, clock_b = _Clock(), _Clock()
            conn_a.start_reader(clock_a)
            conn_b.start_reader(clock_b)
            for n in range(turns):
                admitted = conn_a.call(
                    "prompt.submit",
                    {"session_id": sid, "submission_id": f"b{n}", "text": f"slow {pieces}"},
                )
                turn = int(admitted["turn"])
                if not (clock_a.done(turn).wait(60) and clock_b.done(turn).wait(60)):
                    raise RuntimeError(f"turn {turn} did not finish")
            conn_a.close()
            conn_b.close()
        finally:
            for proc in (standby, owner):
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    delays = [clock_b.seen[k] - t for k, t in clock_a.seen.items() if k in clock_b.seen]
    missing = len(clock_a.seen) - len(delays)
    bad = missing + (len(clock_b.order) - len(set(clock_b.order)))
    bad += sum(1 for x, y in zip(clock_b.order, clock_b.order[1:], strict=False) if y <= x)
    return delays, bad


def bench_floor(url: str, count: int) -> list[float]:
    """A bare NOTIFY: committed on one connection, received by LISTEN on another."""
    import psycopg

    delays: list[float] = []
    with (
        psycopg.connect(url, autocommit=True) as sender,
        psycopg.connect(url, autocommit=True) as listener,
    ):
        listener.execute("LISTEN bench_floor")
        for n in range(count):
            sent = time.monotonic()
            sender.execute("SELECT pg_notify('bench_floor', %s)", (f'{{"n": {n}}}',))
            for _ in listener.notifies(timeout=5, stop_after=1):
                delays.append(time.monotonic() - sent)
    return delays


def main(argv: list[str] | None = None) -> int:
    """Start (or use) a server, measure the floor and the relay, stop the server."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="3 turns")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--pieces", type=int, default=40)
    parser.add_argument("--url", default=None, help="an empty database to use instead")
    args = parser.parse_args(argv)
    if args.quick:
        args.turns = 3
    emit(BENCH, "machine", **machine_info())
    with postgres_url(args.url) as url:
        floor = bench_floor(url, args.turns * args.pieces)
        with tempfile.TemporaryDirectory(prefix="hermes-relay-bench-") as tmp:
            delays, bad = bench_relay(url, Path(tmp), args.turns, args.pieces)
        floor_p50 = statistics.median(floor)
        emit(
            BENCH,
            "floor_notify",
            unit="ms",
            p50=floor_p50 * 1000,
            p99=percentile(floor, 99) * 1000,
            count=len(floor),
        )
        emit(
            BENCH,
            "relay_delay",
            unit="ms",
            p50=statistics.median(delays) * 1000,
            p99=percentile(delays, 99) * 1000,
            items=len(delays),
            out_of_order_or_twice_or_missing=bad,
            ratio_p50_to_floor=ratio(statistics.median(delays), floor_p50),
            note="arrival at the standby's client minus arrival at the owner's client",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
