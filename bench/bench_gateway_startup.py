"""Gateway start-up to ready on a store with many sessions (issue 9: recovery without a scan).

A store of ``--sessions`` sessions (default 10,000 and 100,000; two messages each, nearly all
ended), plus 40 open CLI sessions idle for a day (the start-up sweep ends them) and 20 with a
turn started by an earlier gateway (recovery marks them unknown) and 20 with a queued turn.
Each run starts ``hermes gateway run`` and times it until ``gateway.json`` names it (the
epoch recorded, recovery and the sweep done, the port listening). The first start does the
sweep's and recovery's writes; the later ones find nothing new (median reported).

Floors, same run: a bare interpreter start, and a process that opens the same store (the
engine, its schema check and connection) and exits. In process on the same store: what
start-up read before (decoding every session's head) against the reads that replace it
(``turn_work`` and the sweep through ``sessions_open``).

Run: ``python -m bench.bench_gateway_startup [--quick] [--sessions N[,N]] [--repeat R]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_sessions import build_store
from bench.common import emit, log, ratio

BENCH = "bench_gateway"
ENTRY = "from hermes_es.cli import main; main()"
OPEN_STORE = (
    "import sys; from hermes_es.commands.engine import SessionEngine as E; E(sys.argv[1]).close()"
)
DAY = 86400.0


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return dict(env, HERMES_HOME=str(home), HERMES_RESPONDER="offline")


def _seed(db: Path, sessions: int) -> None:
    """The store: ``sessions`` ended ones, then open, running and queued ones."""
    from hermes_es.commands import turns
    from hermes_es.commands.engine import SessionEngine

    old = time.time() - 400 * DAY
    build_store(db, sessions, 2, ended=True, start_at=old, gen=None)
    day_ago = time.time() - DAY
    with SessionEngine(db, clock=lambda: day_ago, actor="uid:bench") as engine:
        for _ in range(40):
            sid = engine.start_session("cli")
            engine.append_message(sid, "user", "left open")
        for i in range(40):
            sid = engine.start_session("cli")
            turns.admit(engine, sid, submission_id=f"b{i}", client_kind="cli", text="work")
            if i < 20:
                turns.start_next(engine, sid, epoch=1)


def _ready_s(home: Path) -> float:
    """One gateway start: seconds from spawn to gateway.json naming it; then SIGTERM."""
    from hermes_es.gateway.client import running_gateway

    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "gateway", "run"],
        env=_env(home),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = start + 600
        while time.perf_counter() < deadline:
            handle = running_gateway(home)
            if handle is not None and handle.endpoint.pid == proc.pid:
                return time.perf_counter() - start
            if proc.poll() is not None:
                raise RuntimeError(f"gateway exited {proc.returncode}")
            time.sleep(0.005)
        raise RuntimeError("gateway did not get ready in 600 s")
    finally:
        proc.terminate()
        proc.wait(120)


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, check=True)
    return time.perf_counter() - start


def _head_scan_s(db: Path) -> float:
    """What start-up did before: decode every session's head (in process)."""
    from hermes_es.aggregates.state import decode_state
    from hermes_es.projections.catalog import connect

    conn = connect(db)
    try:
        start = time.perf_counter()
        busy = 0
        for (blob,) in conn.execute("SELECT head FROM sessions"):
            state = decode_state(blob)
            busy += bool(state.turn_state)
        return time.perf_counter() - start
    finally:
        conn.close()


def _recovery_reads_s(db: Path, repeat: int) -> float:
    """What start-up reads now (in process, median): the sessions with a running turn, with
    any turn work, and the sweep's candidates."""
    from hermes_es.gateway.reaper import REAPABLE_SOURCES, STARTUP_MIN_IDLE_S
    from hermes_es.projections.catalog import connect
    from hermes_es.queries.turns import sessions_with_turns, sweep_candidates

    conn = connect(db)
    try:
        runs = []
        for _ in range(repeat):
            start = time.perf_counter()
            sessions_with_turns(conn, running=True)
            sessions_with_turns(conn)
            sweep_candidates(conn, REAPABLE_SOURCES, time.time() - STARTUP_MIN_IDLE_S)
            runs.append(time.perf_counter() - start)
        return statistics.median(runs)
    finally:
        conn.close()


def bench(tmp: Path, sessions: int, repeat: int) -> None:
    home = tmp / f"home{sessions}"
    home.mkdir()
    db = home / "state.db"
    log(f"building a store of {sessions:,} sessions")
    _seed(db, sessions)
    env = _env(home)
    first = _ready_s(home)
    later = [_ready_s(home) for _ in range(repeat)]
    bare = [_wall([sys.executable, "-c", "pass"], env) for _ in range(repeat)]
    opened = [_wall([sys.executable, "-c", OPEN_STORE, str(db)], env) for _ in range(repeat)]
    scan = _head_scan_s(db)
    reads = _recovery_reads_s(db, repeat)
    from hermes_es.projections.catalog import connect

    conn = connect(db)
    unknown = conn.execute("SELECT count(*) FROM turn_work WHERE state = 'unknown'").fetchall()
    reaped = conn.execute(
        "SELECT count(*) FROM sessions WHERE end_reason = 'startup_orphan_reap'"
    ).fetchall()
    conn.close()
    med = statistics.median(later)
    floor = statistics.median(bare) + statistics.median(opened)
    log(
        f"{sessions:,} sessions: ready in {med * 1000:.0f} ms (first start {first * 1000:.0f} ms)"
        f"; floor {floor * 1000:.0f} ms (bare {statistics.median(bare) * 1000:.0f} + open store"
        f" {statistics.median(opened) * 1000:.0f}); decoding every head took"
        f" {scan * 1000:.0f} ms, the reads that replace it {reads * 1000:.2f} ms;"
        f" unknown {unknown[0][0]}, swept {reaped[0][0]}"
    )
    emit(
        BENCH,
        f"startup_to_ready_{sessions}",
        value=med * 1000,
        unit="ms",
        floor=floor * 1000,
        ratio=ratio(med, floor),
        first_start_ms=first * 1000,
        bare_python_ms=statistics.median(bare) * 1000,
        open_store_process_ms=statistics.median(opened) * 1000,
        head_scan_ms=scan * 1000,
        recovery_reads_ms=reads * 1000,
        marked_unknown=unknown[0][0],
        swept=reaped[0][0],
        sessions=sessions,
        repeat=repeat,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 sessions, 3 runs")
    parser.add_argument("--sessions", default="10000,100000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sizes = [10_000] if args.quick else [int(s) for s in args.sessions.split(",")]
    repeat = 3 if args.quick else args.repeat
    with tempfile.TemporaryDirectory(prefix="hermes-bench-gw-startup-") as tmp:
        for n in sizes:
            bench(Path(tmp), n, repeat)


if __name__ == "__main__":
    main()
