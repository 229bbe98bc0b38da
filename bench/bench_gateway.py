"""Gateway benchmarks: the group-commit writer, end to end over WebSockets, CLI start-up.

1. ``writer``: ``--sessions`` threads (default 32), each appending ``--messages`` messages to its
   own session, one use case per message, through the group-commit writer (in process, no
   sockets): messages committed per second. Floors in the same run: raw APSW with one message
   (+ FTS row) per transaction and the raw batched insert (100 per transaction) as the
   ceiling; the embedded engine (one transaction per append, same threads) for reference.
2. ``end_to_end``: a real gateway subprocess with the offline responder; ``--clients`` clients
   (default 32) on as many sessions over real WebSockets, each submitting ``--turns`` turns and
   waiting for each to finish. Turns per second against a bare websockets round trip (client
   and server in one process) that sends the same number of frames per turn; p50/p99 of
   submit → admitted (the ``prompt.submit`` response) and submit → completed; fan-out: 8
   clients attached to one session, the spread between the first and the last client receiving
   each stored event.
3. ``startup``: ``hermes -c -q TEXT`` through a running gateway against the same command
   embedded (another home, no gateway), alternating, median of ``--repeat``; a bare interpreter
   start is reported too.

Run: ``python -m bench.bench_gateway [--quick]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import apsw

from bench.common import emit, latency_summary, log, ratio
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.group_engine import GroupCommitEngine
from hermes_es.gateway.client import running_gateway

BENCH = "bench_gateway"
ENTRY = "from hermes_es.cli import main; main()"
TEXT = ("the quick brown fox jumps over the lazy dog while the gateway commits " * 5)[:300]


# -- 1. writer --------------------------------------------------------------------------------


def _raw_floor(path: Path, n: int, per_tx: int) -> float:
    """Raw APSW: ``n`` messages (+ external-content FTS rows), ``per_tx`` per transaction."""
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, sid TEXT, seq INT, body TEXT)")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(body, content='m', content_rowid='id')")
    start = time.perf_counter()
    for first in range(0, n, per_tx):
        with conn:
            for i in range(first, min(n, first + per_tx)):
                conn.execute("INSERT INTO m (sid, seq, body) VALUES (?, ?, ?)", ("s", i, TEXT))
                conn.execute("INSERT INTO f (rowid, body) VALUES (last_insert_rowid(), ?)", (TEXT,))
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


def _threads_append(engine: SessionEngine, sessions: int, messages: int) -> float:
    sids = [engine.start_session("cli", cwd="/tmp") for _ in range(sessions)]
    barrier = threading.Barrier(sessions + 1)

    def work(sid: str) -> None:
        barrier.wait()
        for i in range(messages):
            engine.append_message(sid, "user", f"{i} {TEXT}")

    threads = [threading.Thread(target=work, args=(s,)) for s in sids]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return sessions * messages / (time.perf_counter() - start)


def bench_writer(tmp: Path, sessions: int, messages: int) -> None:
    n = sessions * messages
    floor = _raw_floor(tmp / "raw1.db", n, 1)
    ceiling = _raw_floor(tmp / "raw100.db", n, 100)
    log(f"writer: raw floor {floor:,.0f}/s, batched ceiling {ceiling:,.0f}/s")
    grouped = GroupCommitEngine(tmp / "group.db")
    try:
        rate = _threads_append(grouped, sessions, messages)
        groups, jobs = grouped.writer.groups, grouped.writer.jobs
    finally:
        grouped.close()
    embedded = SessionEngine(tmp / "embedded.db")
    try:
        plain = _threads_append(embedded, sessions, messages)
    finally:
        embedded.close()
    emit(
        BENCH,
        "writer_msgs_per_s",
        value=rate,
        unit="msg/s",
        floor=floor,
        ratio=ratio(rate, floor),
        target=2.0,
        ok=rate >= 2 * floor,
        ceiling=ceiling,
        ceiling_ratio=ratio(rate, ceiling),
        sessions=sessions,
        messages=n,
        use_cases_per_commit=round(jobs / max(groups, 1), 2),
        embedded_msgs_per_s=round(plain, 1),
        vs_embedded=ratio(rate, plain),
    )


# -- 2. end to end ----------------------------------------------------------------------------


def _start_gateway(home: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, HERMES_HOME=str(home), HERMES_RESPONDER="offline")
    env.pop("HERMES_NO_GATEWAY", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "gateway", "run"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        handle = running_gateway(home)
        if handle is not None and handle.endpoint.pid == proc.pid:
            return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("gateway did not start")


async def _client(url: str, ticket: str) -> Any:
    from websockets.asyncio.client import connect

    return await connect(f"{url}?ticket={ticket}", max_size=2**24)


class RpcClient:
    """A tiny asyncio JSON-RPC client that also records notification arrival times."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.finished: dict[int, asyncio.Future[float]] = {}
        self.arrivals: dict[tuple[str, int], float] = {}
        self.done_at: dict[int, float] = {}
        self.frames = 0
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for raw in self.ws:
            now = time.perf_counter()
            self.frames += 1
            message = json.loads(raw)
            if "id" in message and "method" not in message:
                self.waiting.pop(message["id"]).set_result(message.get("result"))
                continue
            params = message.get("params") or {}
            if "sequence" in params:  # a stored event (turn.stream items carry none)
                self.arrivals[(params["session_id"], params["sequence"])] = now
            if params.get("type") == "hermes.turn.finished":
                turn = params["event"]["turn"]
                self.done_at[turn] = now
                future = self.finished.pop(turn, None)
                if future is not None:
                    future.set_result(now)

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[self.next_id] = future
        await self.ws.send(
            json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        )
        return await future

    async def turn(self, sid: str, text: str) -> tuple[float, float]:
        """Submit and wait: (submit → admitted, submit → completed) in seconds."""
        start = time.perf_counter()
        admitted = await self.call(
            "prompt.submit", {"session_id": sid, "submission_id": uuid.uuid4().hex, "text": text}
        )
        t_admitted = time.perf_counter()
        turn = admitted["turn"]
        if turn in self.done_at:  # finished before this coroutine resumed
            return t_admitted - start, self.done_at.pop(turn) - start
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.finished[turn] = future
        done = await future
        self.done_at.pop(turn, None)
        return t_admitted - start, done - start

    async def close(self) -> None:
        await self.ws.close()
        self.reader.cancel()


async def _e2e(home: Path, clients: int, turns: int) -> dict[str, Any]:
    handle = running_gateway(home)
    assert handle is not None
    url = handle.endpoint.ws_url
    conns = [RpcClient(await _client(url, handle.ticket("interactive"))) for _ in range(clients)]
    sids = [(await c.call("session.create", {}))["session_id"] for c in conns]
    for c, sid in zip(conns, sids, strict=True):  # warm-up: first turns build the prompt
        await c.turn(sid, "warm up")
    frames_before = sum(c.frames for c in conns)
    admitted: list[float] = []
    completed: list[float] = []

    async def run(c: RpcClient, sid: str) -> None:
        for i in range(turns):
            a, d = await c.turn(sid, f"turn {i}")
            admitted.append(a)
            completed.append(d)

    start = time.perf_counter()
    await asyncio.gather(*(run(c, s) for c, s in zip(conns, sids, strict=True)))
    elapsed = time.perf_counter() - start
    frames = sum(c.frames for c in conns) - frames_before
    for c in conns:
        await c.close()
    # fan-out: 8 clients on one session, one of them submits
    watchers = [RpcClient(await _client(url, handle.ticket("interactive"))) for _ in range(8)]
    sid = (await watchers[0].call("session.create", {}))["session_id"]
    for w in watchers[1:]:
        await w.call("session.resume", {"ref": sid})
    for i in range(max(10, turns)):
        await watchers[0].turn(sid, f"fan {i}")
    await asyncio.sleep(0.2)
    spreads = []
    for key in watchers[0].arrivals:
        times = [w.arrivals[key] for w in watchers if key in w.arrivals]
        if len(times) == 8:
            spreads.append(max(times) - min(times))
    for w in watchers:
        await w.close()
    return {
        "turns_per_s": clients * turns / elapsed,
        "frames_per_turn": frames / (clients * turns) + 1,  # + the submit itself
        "admitted": latency_summary(admitted),
        "completed": latency_summary(completed),
        "fanout": latency_summary(spreads),
    }


async def _bare_round_trip(clients: int, turns: int, frames_per_turn: int) -> float:
    """Bare websockets: per turn one request in, ``frames_per_turn - 1`` frames out."""
    from websockets.asyncio.client import connect
    from websockets.asyncio.server import serve

    async def handler(ws: Any) -> None:
        async for raw in ws:
            for _ in range(frames_per_turn - 1):
                await ws.send(raw)

    async with serve(handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        conns = [await connect(f"ws://127.0.0.1:{port}") for _ in range(clients)]

        async def run(ws: Any) -> None:
            for i in range(turns):
                await ws.send(json.dumps({"turn": i, "text": TEXT[:40]}))
                for _ in range(frames_per_turn - 1):
                    await ws.recv()

        start = time.perf_counter()
        await asyncio.gather(*(run(ws) for ws in conns))
        elapsed = time.perf_counter() - start
        for ws in conns:
            await ws.close()
    return clients * turns / elapsed


def bench_end_to_end(tmp: Path, clients: int, turns: int) -> None:
    home = tmp / "e2e-home"
    home.mkdir()
    proc = _start_gateway(home)
    try:
        result = asyncio.run(_e2e(home, clients, turns))
    finally:
        proc.terminate()
        proc.wait(60)
    frames = max(2, round(result["frames_per_turn"]))
    bare = asyncio.run(_bare_round_trip(clients, turns, frames))
    rate = result["turns_per_s"]
    log(f"end to end: {rate:,.0f} turns/s, bare {bare:,.0f}/s ({frames} frames per turn)")
    emit(
        BENCH,
        "e2e_turns_per_s",
        value=rate,
        unit="turn/s",
        floor=bare,
        ratio=ratio(rate, bare),
        target=0.3,
        ok=rate >= 0.3 * bare,
        clients=clients,
        turns=clients * turns,
        frames_per_turn=frames,
    )
    emit(
        BENCH,
        "submit_to_admitted",
        value=result["admitted"]["p99_ms"],
        unit="ms p99",
        target=20.0,
        ok=result["admitted"]["p99_ms"] <= 20.0,
        **result["admitted"],
    )
    emit(
        BENCH,
        "submit_to_completed",
        value=result["completed"]["p99_ms"],
        unit="ms p99",
        **result["completed"],
    )
    emit(
        BENCH,
        "fanout_spread_8_clients",
        value=result["fanout"]["p99_ms"],
        unit="ms p99",
        target=10.0,
        ok=result["fanout"]["p99_ms"] <= 10.0,
        **result["fanout"],
    )


# -- 3. start-up ------------------------------------------------------------------------------


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        cmd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - start


def bench_startup(tmp: Path, repeat: int) -> None:
    gw_home, emb_home = tmp / "su-gw", tmp / "su-emb"
    gw_home.mkdir()
    emb_home.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    gw_env = dict(base, HERMES_HOME=str(gw_home), HERMES_RESPONDER="offline")
    emb_env = dict(base, HERMES_HOME=str(emb_home), HERMES_RESPONDER="offline")
    cmd = [sys.executable, "-c", ENTRY, "-c", "-q", "hello"]
    first = [sys.executable, "-c", ENTRY, "--source", "cli", "-q", "hello"]
    proc = _start_gateway(gw_home)
    try:
        _timed(first, gw_env)
        _timed(first, emb_env)
        through, embedded, bare = [], [], []
        for _ in range(repeat):
            through.append(_timed(cmd, gw_env))
            embedded.append(_timed(cmd, emb_env))
            bare.append(_timed([sys.executable, "-c", "pass"], base))
    finally:
        proc.terminate()
        proc.wait(60)
    med_gw, med_emb = statistics.median(through), statistics.median(embedded)
    log(f"start-up: through the gateway {med_gw * 1000:.0f} ms, embedded {med_emb * 1000:.0f} ms")
    emit(
        BENCH,
        "startup_c_q_via_gateway",
        value=med_gw * 1000,
        unit="ms",
        floor=med_emb * 1000,
        ratio=ratio(med_gw, med_emb),
        target=1.5,
        ok=med_gw <= 1.5 * med_emb,
        min_ms=min(through) * 1000,
        embedded_min_ms=min(embedded) * 1000,
        bare_python_ms=statistics.median(bare) * 1000,
        repeat=repeat,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Small sizes.")
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", default="writer,end_to_end,startup")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.turns, args.repeat = 40, 5, 3
    only = set(args.only.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    try:
        if "writer" in only:
            bench_writer(tmp, args.sessions, args.messages)
        if "end_to_end" in only:
            bench_end_to_end(tmp, args.clients, args.turns)
        if "startup" in only:
            bench_startup(tmp, args.repeat)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
