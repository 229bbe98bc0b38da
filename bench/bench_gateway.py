"""Gateway benchmarks: the group-commit writer, end to end over WebSockets, CLI start-up.

1. ``writer``: ``--sessions`` sessions (default 32), each appending ``--messages`` messages,
   one use case per message, through the group-commit writer (in process, no sockets):
   messages committed per second, the process CPU time per message, the writer thread's own
   CPU time per message and the use cases per commit (mean, p10/p50/p90, max). The headline
   (``writer_msgs_per_s``) submits every session's use cases from one asyncio event loop
   (``submit_async``), as the gateway does; ``writer_threads_msgs_per_s`` runs one OS thread
   per session blocking in ``GroupWriter.call`` (the turn threads' way), with
   ``direct_wake_*``: the same with the writer waking its callers itself (no waker thread).
   The grouped runs use the gateway process's interpreter settings (GIL switch interval,
   garbage collector thresholds, the set-up frozen: ``hermes_es.gateway.server``).
   Floors in the same run: raw APSW with one message (+ FTS row) per transaction and the raw batched
   insert (100 per transaction) as the ceiling; the embedded engine (one transaction per
   append, same threads) for reference. ``writer_turns`` is the turn-shaped workload: what the
   gateway really commits per turn, as the same five use cases (admit, start, the user
   message, the reply, finish; two messages), from the same threads.
2. ``end_to_end``: a real gateway subprocess with the offline responder; ``--clients`` clients
   (default 32) on as many sessions over real WebSockets, each submitting ``--turns`` turns and
   waiting for each to finish. Turns per second against a bare websockets server that is also
   a subprocess, driven by the same client code (same JSON-RPC frames, same parsing) and
   sending the same number of frames per turn; the CPU time each server process spent per
   turn (``/proc``), which the load of a shared machine disturbs far less than wall-clock;
   p50/p99 of submit → admitted (the ``prompt.submit`` response) and submit → completed;
   fan-out: 8 clients attached to one session, the spread between the first and the last
   client receiving each stored event. ``--trace wall`` (the default) runs the gateway with
   ``HERMES_GATEWAY_TRACE`` and prints where each admission's milliseconds go (socket, the
   handler's read, the writer's queue, its group and commit, the hand-back to the loop, the
   answer's write, the client's read); ``--trace cpu`` adds the CPU time the gateway's loop
   and writer threads spent in each stage (a system call per stamp: it costs CPU a turn).
3. ``startup``: ``hermes -c -q TEXT`` through a running gateway against the same command
   embedded (another home, no gateway), alternating, median of ``--repeat``; a bare interpreter
   start is reported too.

Run: ``python -m bench.bench_gateway [--quick]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import apsw

from bench.common import emit, latency_summary, log, ratio
from hermes_es.commands.engine import SessionEngine, to_draft
from hermes_es.commands.group_engine import GroupCommitEngine
from hermes_es.commands.writer import GroupWriter
from hermes_es.gateway.client import running_gateway
from hermes_es.gateway.server import GC_THRESHOLDS, SWITCH_INTERVAL_S

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
    start, cpu = time.perf_counter(), time.process_time()
    for first in range(0, n, per_tx):
        with conn:
            for i in range(first, min(n, first + per_tx)):
                conn.execute("INSERT INTO m (sid, seq, body) VALUES (?, ?, ?)", ("s", i, TEXT))
                conn.execute("INSERT INTO f (rowid, body) VALUES (last_insert_rowid(), ?)", (TEXT,))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    conn.close()
    _FLOOR_CPU[per_tx] = cpu / n * 1e6
    return n / elapsed


_FLOOR_CPU: dict[int, float] = {}
"""Process CPU µs per message of the last raw floor run, by messages per transaction."""


def _writer_tid(engine: GroupCommitEngine) -> int:
    """The native id of the engine's writer thread."""
    thread = engine.writer._thread
    assert thread is not None and thread.native_id is not None
    return thread.native_id


def _thread_cpu(tid: int) -> float:
    """User + system CPU seconds one thread of this process has used (``/proc``)."""
    fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _size_summary(sizes: dict[int, int]) -> dict[str, float]:
    """Use cases per commit: mean, median, 10th and 90th percentile, largest (by commit)."""
    flat = sorted(k for k, v in sizes.items() for _ in range(v))
    if not flat:
        return {}

    def at(q: float) -> int:
        return flat[min(len(flat) - 1, int(q * len(flat)))]

    return {
        "commits": len(flat),
        "mean": round(sum(flat) / len(flat), 2),
        "p10": at(0.1),
        "p50": at(0.5),
        "p90": at(0.9),
        "max": flat[-1],
    }


def _in_threads(sessions: int, work: Callable[[int], None]) -> tuple[float, float]:
    """Run ``work(i)`` on ``sessions`` threads at once: (wall seconds, process CPU seconds)."""
    barrier = threading.Barrier(sessions + 1)

    def run(i: int) -> None:
        barrier.wait()
        work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    barrier.wait()
    start, cpu = time.perf_counter(), time.process_time()
    for t in threads:
        t.join()
    return time.perf_counter() - start, time.process_time() - cpu


def _threads_append(
    engine: SessionEngine,
    sessions: int,
    messages: int,
    on_start: Callable[[], None] | None = None,
) -> tuple[float, float]:
    """Messages per second and process CPU µs per message: one use case per message
    (``on_start`` is called once the sessions exist, before the appends)."""
    sids = [engine.start_session("cli", cwd="/tmp") for _ in range(sessions)]
    if on_start is not None:
        on_start()

    def work(i: int) -> None:
        for n in range(messages):
            engine.append_message(sids[i], "user", f"{n} {TEXT}")

    wall, cpu = _in_threads(sessions, work)
    n = sessions * messages
    return n / wall, cpu / n * 1e6


def _loop_append(
    engine: GroupCommitEngine,
    sessions: int,
    messages: int,
    on_start: Callable[[], None] | None = None,
) -> tuple[float, float]:
    """As ``_threads_append``, but every session's use cases are submitted from one asyncio
    event loop (``GroupWriter.submit_async``, pure), as the gateway submits its writes: each
    session awaits its append before it submits the next. Messages per second and process
    CPU µs per message."""
    sids = [engine.start_session("cli", cwd="/tmp") for _ in range(sessions)]
    if on_start is not None:
        on_start()
    writer = engine.writer

    async def session(sid: str) -> None:
        for n in range(messages):
            draft = to_draft({"role": "user", "content": f"{n} {TEXT}"})
            await writer.submit_async(
                partial(SessionEngine.append_turn, engine, sid, [draft]), pure=True
            )

    async def run() -> tuple[float, float]:
        start, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(session(sid) for sid in sids))
        return time.perf_counter() - start, time.process_time() - cpu

    wall, cpu = asyncio.run(run())
    n = sessions * messages
    return n / wall, cpu / n * 1e6


def _threads_turns(engine: GroupCommitEngine, sessions: int, turns: int) -> tuple[float, float]:
    """The gateway's use cases per turn (admit, start, user message, reply, finish), each
    through the writer: messages per second and process CPU µs per message (2 a turn)."""
    from hermes_es.commands import turns as t

    sids = [engine.start_session("cli", cwd="/tmp") for _ in range(sessions)]
    run = partial(engine.writer.call, pure=True)  # as the gateway submits them

    def work(i: int) -> None:
        sid = sids[i]
        for n in range(turns):
            text = f"{n} {TEXT}"
            admitted = run(
                partial(
                    t.admit, engine, sid, submission_id=f"{sid}-{n}", client_kind="cli", text=text
                )
            )
            turn = run(partial(t.start_next, engine, sid, epoch=1))
            assert turn == admitted.turn
            [user] = engine.append_turn(sid, [{"role": "user", "content": text}])
            seqs = engine.append_turn(sid, [{"role": "assistant", "content": f"re: {text}"}])
            run(partial(t.finish, engine, sid, turn, outcome="completed", seqs=[user, *seqs]))

    wall, cpu = _in_threads(sessions, work)
    n = sessions * turns * 2
    return n / wall, cpu / n * 1e6


class _DirectWakeWriter(GroupWriter):
    """The group writer waking its blocked callers itself, without its waker thread (what it
    did before session 5): run beside the default for comparison."""

    def start(self) -> GroupWriter:
        super().start()
        waker, self._waker = self._waker, None
        if waker is not None:
            waker.stop()
        return self


@contextlib.contextmanager
def _as_gateway_process() -> Iterator[None]:
    """The interpreter settings the gateway process runs its writer under
    (``hermes_es.gateway.server``: GIL switch interval, garbage collector thresholds; the
    caller freezes what its set-up loaded, ``gc.freeze``), restored afterwards."""
    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        sys.setswitchinterval(interval)


def _grouped(
    path: Path,
    sessions: int,
    messages: int,
    *,
    direct_wake: bool = False,
    callers: str = "threads",
) -> tuple[float, float, float, int, int, dict[int, int]]:
    """The appends through a group-commit engine: msg/s, process CPU µs/msg, writer thread
    CPU µs/msg, commits, use cases, use cases per commit (counted from the first append).
    ``callers``: ``threads`` (one OS thread per session blocking in ``GroupWriter.call``) or
    ``loop`` (every session on one event loop, ``submit_async``, as the gateway submits)."""
    grouped = GroupCommitEngine(path)
    if direct_wake:
        grouped.writer.stop()
        grouped.writer = _DirectWakeWriter(grouped.store).start()
    try:
        tid = _writer_tid(grouped)
        at_start: dict[str, Any] = {}

        def mark() -> None:  # the appends start: what the writer did so far is set-up
            at_start.update(cpu=_thread_cpu(tid), sizes=dict(grouped.writer.group_sizes))
            at_start.update(groups=grouped.writer.groups, jobs=grouped.writer.jobs)
            gc.freeze()  # as the gateway once it is ready

        append = _loop_append if callers == "loop" else _threads_append
        with _as_gateway_process():
            rate, cpu = append(grouped, sessions, messages, mark)
        writer_cpu = (_thread_cpu(tid) - at_start["cpu"]) / (sessions * messages) * 1e6
        groups = grouped.writer.groups - at_start["groups"]
        jobs = grouped.writer.jobs - at_start["jobs"]
        sizes_before: dict[int, int] = at_start["sizes"]
        sizes = {
            k: v - sizes_before.get(k, 0)
            for k, v in grouped.writer.group_sizes.items()
            if v > sizes_before.get(k, 0)
        }
    finally:
        grouped.close()
    return rate, cpu, writer_cpu, groups, jobs, sizes


def bench_writer(tmp: Path, sessions: int, messages: int) -> None:
    n = sessions * messages
    floor = _raw_floor(tmp / "raw1.db", n, 1)
    ceiling = _raw_floor(tmp / "raw100.db", n, 100)
    log(f"writer: raw floor {floor:,.0f}/s, batched ceiling {ceiling:,.0f}/s")
    rate, cpu, writer_cpu, groups, jobs, sizes = _grouped(
        tmp / "loop.db", sessions, messages, callers="loop"
    )
    threads = _grouped(tmp / "group.db", sessions, messages)
    direct = _grouped(tmp / "direct.db", sessions, messages, direct_wake=True)
    embedded = SessionEngine(tmp / "embedded.db")
    try:
        plain, plain_cpu = _threads_append(embedded, sessions, messages)
    finally:
        embedded.close()
    floor_cpu = _FLOOR_CPU[1]
    emit(
        BENCH,
        "writer_msgs_per_s",
        value=rate,
        unit="msg/s",
        callers="one event loop (submit_async), as the gateway submits",
        floor=floor,
        ratio=ratio(rate, floor),
        target=2.0,
        ok=rate >= 2 * floor,
        ceiling=ceiling,
        ceiling_ratio=ratio(rate, ceiling),
        sessions=sessions,
        messages=n,
        use_cases_per_commit=round(jobs / max(groups, 1), 2),
        group_sizes=_size_summary(sizes),
        cpu_us_per_msg=round(cpu, 1),
        writer_thread_cpu_us_per_msg=round(writer_cpu, 1),
        floor_cpu_us_per_msg=round(floor_cpu, 1),
        cpu_ratio=ratio(floor_cpu, cpu),
    )
    t_rate, t_cpu, t_writer_cpu, t_groups, t_jobs, t_sizes = threads
    emit(
        BENCH,
        "writer_threads_msgs_per_s",
        value=t_rate,
        unit="msg/s",
        callers="one OS thread per session blocking in GroupWriter.call",
        floor=floor,
        ratio=ratio(t_rate, floor),
        sessions=sessions,
        messages=n,
        use_cases_per_commit=round(t_jobs / max(t_groups, 1), 2),
        group_sizes=_size_summary(t_sizes),
        cpu_us_per_msg=round(t_cpu, 1),
        writer_thread_cpu_us_per_msg=round(t_writer_cpu, 1),
        cpu_ratio=ratio(floor_cpu, t_cpu),
        direct_wake_msgs_per_s=round(direct[0], 1),
        direct_wake_ratio=ratio(direct[0], floor),
        direct_wake_cpu_us_per_msg=round(direct[1], 1),
        direct_wake_writer_thread_cpu_us_per_msg=round(direct[2], 1),
        embedded_msgs_per_s=round(plain, 1),
        embedded_cpu_us_per_msg=round(plain_cpu, 1),
        vs_embedded=ratio(t_rate, plain),
    )
    turns = max(1, messages // 2)
    shaped = GroupCommitEngine(tmp / "turns.db")
    try:
        turn_rate, turn_cpu = _threads_turns(shaped, sessions, turns)
        groups, jobs = shaped.writer.groups, shaped.writer.jobs
    finally:
        shaped.close()
    log(
        f"writer: {rate:,.0f} msg/s one use case each from one event loop; {t_rate:,.0f} from"
        f" {sessions} threads ({direct[0]:,.0f} waking them on the writer thread); turn-shaped"
        f" {turn_rate:,.0f} msg/s"
    )
    emit(
        BENCH,
        "writer_turns_msgs_per_s",
        value=turn_rate,
        unit="msg/s",
        floor=floor,
        ratio=ratio(turn_rate, floor),
        turns_per_s=round(turn_rate / 2, 1),
        use_cases_per_s=round(turn_rate * 2.5, 1),
        use_cases_per_commit=round(jobs / max(groups, 1), 2),
        cpu_us_per_msg=round(turn_cpu, 1),
        cpu_ratio=ratio(floor_cpu, turn_cpu),
        sessions=sessions,
        turns=sessions * turns,
    )


# -- 2. end to end ----------------------------------------------------------------------------


def _start_gateway(
    home: Path, trace: Path | None = None, *, cpu: bool = False
) -> subprocess.Popen[bytes]:
    env = dict(os.environ, HERMES_HOME=str(home), HERMES_RESPONDER="offline")
    env.pop("HERMES_NO_GATEWAY", None)
    if trace is not None:
        env["HERMES_GATEWAY_TRACE"] = str(trace)
        env["HERMES_GATEWAY_TRACE_CPU"] = "1" if cpu else "0"
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
        self.answered_at: dict[int, float] = {}
        self.submits: dict[str, tuple[float, int]] = {}
        """submission id → (when it was sent, its request id): joined with the trace."""
        self.frames = 0
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for raw in self.ws:
            now = time.perf_counter()
            self.frames += 1
            message = json.loads(raw)
            if "id" in message and "method" not in message:
                self.answered_at[message["id"]] = now
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
        submission = uuid.uuid4().hex
        start = time.perf_counter()
        self.submits[submission] = (start, self.next_id + 1)
        admitted = await self.call(
            "prompt.submit", {"session_id": sid, "submission_id": submission, "text": text}
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


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU time used so far by a process's main thread (the gateway's event loop: ``loop``)
    and by all its other threads together (the writer, its waker, the checkpointer, the
    turn threads: ``others``)."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        # (Python does not name its threads for the OS: every other thread is "others")
        name = "loop" if task.name == str(pid) else "others"
        fields = text.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _switches(pid: int) -> tuple[int, int]:
    """Context switches of all a process's threads so far: (voluntary: it waited for
    something, such as a wake-up or the GIL; involuntary: the scheduler took its CPU)."""
    voluntary = involuntary = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            lines = (task / "status").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if line.startswith("voluntary_ctxt_switches:"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                involuntary += int(line.split()[1])
    return voluntary, involuntary


async def _drive(
    connect_one: Callable[[], Any], clients: int, turns: int, pid: int
) -> dict[str, Any]:
    """``clients`` RpcClients on a session each, ``turns`` turns each, all at once: turns/s,
    frames per turn, latencies, and the server process's CPU time per turn."""
    conns = [RpcClient(await connect_one()) for _ in range(clients)]
    sids = [(await c.call("session.create", {}))["session_id"] for c in conns]
    for c, sid in zip(conns, sids, strict=True):  # warm-up: first turns build the prompt
        await c.turn(sid, "warm up")
    frames_before = sum(c.frames for c in conns)
    for c in conns:
        c.submits.clear()
    admitted: list[float] = []
    completed: list[float] = []

    async def run(c: RpcClient, sid: str) -> None:
        for i in range(turns):
            a, d = await c.turn(sid, f"turn {i}")
            admitted.append(a)
            completed.append(d)

    cpu = _cpu_seconds(pid)
    threads = _thread_cpu_seconds(pid)
    switches = _switches(pid)
    start = time.perf_counter()
    await asyncio.gather(*(run(c, s) for c, s in zip(conns, sids, strict=True)))
    elapsed = time.perf_counter() - start
    cpu = _cpu_seconds(pid) - cpu
    threads_after = _thread_cpu_seconds(pid)
    switched = [after - before for after, before in zip(_switches(pid), switches, strict=True)]
    per_thread = {
        name: round((spent - threads.get(name, 0.0)) / (clients * turns) * 1000, 3)
        for name, spent in sorted(threads_after.items())
        if spent - threads.get(name, 0.0) > 0
    }
    frames = sum(c.frames for c in conns) - frames_before
    sent = {
        key: (at, c.answered_at.get(rid, math.nan))
        for c in conns
        for key, (at, rid) in c.submits.items()
    }
    for c in conns:
        await c.close()
    return {
        "sent": sent,
        "turns_per_s": clients * turns / elapsed,
        "frames_per_turn": frames / (clients * turns) + 1,  # + the submit itself
        "server_cpu_ms_per_turn": cpu / (clients * turns) * 1000,
        "server_thread_cpu_ms_per_turn": per_thread,
        "server_switches_per_turn": [round(n / (clients * turns), 2) for n in switched],
        "admitted": latency_summary(admitted),
        "completed": latency_summary(completed),
        "admitted_s": admitted,
        "completed_s": completed,
    }


async def _e2e(home: Path, clients: int, turns: int, pid: int) -> dict[str, Any]:
    """One round against the gateway: new clients on new sessions."""
    handle = running_gateway(home)
    assert handle is not None
    url = handle.endpoint.ws_url
    return await _drive(lambda: _client(url, handle.ticket("interactive")), clients, turns, pid)


async def _fanout(home: Path, turns: int) -> dict[str, float]:
    """8 clients on one session, one of them submits: the spread between the first and the
    last client receiving each stored event."""
    handle = running_gateway(home)
    assert handle is not None
    url = handle.endpoint.ws_url
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
    return latency_summary(spreads)


def bare_server(frames_per_turn: int) -> None:
    """The floor's server (run in its own process): a bare websockets server speaking just
    enough of the protocol for ``RpcClient``. Per ``prompt.submit`` it sends the response,
    ``frames_per_turn - 3`` stored-event notifications and the ``hermes.turn.finished`` one
    (``frames_per_turn - 1`` frames, as the gateway does); it prints its port, then serves
    until stdin closes."""
    from websockets.asyncio.server import serve

    async def handler(ws: Any) -> None:
        sequence = 0
        turn = 0
        async for raw in ws:
            request = json.loads(raw)
            if request["method"] != "prompt.submit":
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {
                    "session_id": uuid.uuid4().hex}}))  # fmt: skip
                continue
            sid = request["params"]["session_id"]
            turn += 1
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {
                "session_id": sid, "turn": turn, "duplicate": False}}))  # fmt: skip
            for i in range(frames_per_turn - 2):
                sequence += 1
                last = i == frames_per_turn - 3
                event = {"type": "hermes.turn.finished" if last else "hermes.bench.event",
                         "session_id": sid, "sequence": sequence, "event": {"turn": turn,
                         "text": request["params"]["text"]}}  # fmt: skip
                await ws.send(json.dumps({"jsonrpc": "2.0", "method": "session.event",
                                          "params": event}))  # fmt: skip

    async def main() -> None:
        # No per-message compression, as the gateway (small frames on loopback).
        async with serve(handler, "127.0.0.1", 0, compression=None) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            print(port, flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(main())


@contextlib.contextmanager
def _bare_server(frames_per_turn: int) -> Iterator[tuple[str, int]]:
    """The floor's server in a subprocess (its URL and pid), kept for every round."""
    code = f"from bench.bench_gateway import bare_server; bare_server({frames_per_turn})"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parent.parent,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"ws://127.0.0.1:{port}", proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)


def _bare_round_trip(url: str, pid: int, clients: int, turns: int) -> dict[str, Any]:
    """One round of the floor: the same clients in this process against the bare server."""
    result = asyncio.run(_drive(lambda: _client(url, "-"), clients, turns, pid))
    result.pop("sent")
    return result


def _merged(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Several rounds of one side as one: the median round's rates and CPU times (by turns
    per second), its latencies over every round's turns together."""
    ordered = sorted(rounds, key=lambda r: r["turns_per_s"])
    merged = dict(ordered[len(ordered) // 2])
    for key in ("server_cpu_ms_per_turn", "frames_per_turn"):
        merged[key] = statistics.median(r[key] for r in rounds)
    merged["turns_per_s_rounds"] = [round(r["turns_per_s"]) for r in rounds]
    merged["server_cpu_ms_rounds"] = [round(r["server_cpu_ms_per_turn"], 3) for r in rounds]
    for key in ("admitted", "completed"):
        merged[key] = latency_summary([x for r in rounds for x in r[f"{key}_s"]])
    merged.pop("admitted_s", None)
    merged.pop("completed_s", None)
    return merged


STAGES = (
    ("received", "client sent → gateway's protocol has the bytes (socket, loop busy)"),
    ("read", "received → handler read it (uvicorn, Starlette, loop queue)"),
    ("queued", "read → handed to the writer (decode, dispatch)"),
    ("run", "handed → the writer runs it (queue, the group before)"),
    ("committed", "runs → its group committed (the group's use cases, commit)"),
    ("resumed", "committed → loop has the result (hand-back, loop queue)"),
    ("written", "resumed → answer frame written (sender)"),
    ("answered", "written → client has the answer (socket, client loop)"),
)


def _admission_split(trace: Path, sent: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """Per stage of the admission path (``hermes_es.gateway.trace``): wall-clock p50/p99 in
    ms, and the CPU time the gateway's loop and writer threads spent during it (p50/p99):
    how much other work ran ahead of the admission, whatever the machine's load."""
    if not trace.exists():
        return {}
    stamps = json.loads(trace.read_bytes())["admissions"]
    walls: dict[str, list[float]] = {name: [] for name, _ in STAGES}
    loops: dict[str, list[float]] = {name: [] for name, _ in STAGES}
    writers: dict[str, list[float]] = {name: [] for name, _ in STAGES}
    for key, (at, answered) in sent.items():
        mine = stamps.get(key)
        if not mine:
            continue
        row = {"sent": [at], **mine, "answered": [answered]}
        before = "sent"
        for name, _ in STAGES:
            if name not in row or math.isnan(row[name][0]):
                continue
            then, now = row[before], row[name]
            walls[name].append(now[0] - then[0])
            if len(then) == len(now) == 3:  # with the threads' CPU clocks
                loops[name].append(now[1] - then[1])
                writers[name].append(now[2] - then[2])
            before = name
    split: dict[str, Any] = {}
    for name, _ in STAGES:
        if walls[name]:
            split[name] = latency_summary(walls[name])
            if loops[name]:
                split[name]["loop_cpu"] = latency_summary(loops[name])
                split[name]["writer_cpu"] = latency_summary(writers[name])
    return split


def bench_end_to_end(
    tmp: Path, clients: int, turns: int, trace_mode: str = "wall", rounds: int = 3
) -> None:
    home = tmp / "e2e-home"
    home.mkdir()
    trace = tmp / "admission-trace.json"
    proc = _start_gateway(home, trace if trace_mode != "off" else None, cpu=trace_mode == "cpu")
    gateway: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    sent: dict[str, tuple[float, float]] = {}
    try:
        # The gateway's and the floor's rounds alternate (each on new clients and sessions),
        # so a change in the machine's load falls on both sides alike.
        gateway.append(asyncio.run(_e2e(home, clients, turns, proc.pid)))
        frames = max(3, round(gateway[0]["frames_per_turn"]))
        with _bare_server(frames) as (url, bare_pid):
            floors.append(_bare_round_trip(url, bare_pid, clients, turns))
            for _ in range(rounds - 1):
                gateway.append(asyncio.run(_e2e(home, clients, turns, proc.pid)))
                floors.append(_bare_round_trip(url, bare_pid, clients, turns))
        fanout = asyncio.run(_fanout(home, turns))
    finally:
        proc.terminate()
        proc.wait(60)
    for each in gateway:
        sent.update(each.pop("sent"))
    ratios = [g["turns_per_s"] / f["turns_per_s"] for g, f in zip(gateway, floors, strict=True)]
    result, floor = _merged(gateway), _merged(floors)
    result["fanout"] = fanout
    split = _admission_split(trace, sent)
    for name, text in STAGES:
        if name in split:
            stage = split[name]
            cpu = ""
            if "loop_cpu" in stage:
                cpu = (
                    f"; loop CPU p50 {stage['loop_cpu']['p50_ms']:.2f} /"
                    f" p99 {stage['loop_cpu']['p99_ms']:.2f} ms, writer CPU p50"
                    f" {stage['writer_cpu']['p50_ms']:.2f} / p99"
                    f" {stage['writer_cpu']['p99_ms']:.2f} ms"
                )
            log(
                f"  admission {text}: p50 {stage['p50_ms']:.2f} / p99 {stage['p99_ms']:.2f} ms"
                + cpu
            )
    bare = floor["turns_per_s"]
    rate = result["turns_per_s"]
    cpu, bare_cpu = result["server_cpu_ms_per_turn"], floor["server_cpu_ms_per_turn"]
    log(
        f"end to end (median of {rounds} alternated rounds): {rate:,.0f} turns/s"
        f" ({cpu:.2f} ms CPU a turn), bare {bare:,.0f}/s ({bare_cpu:.2f} ms), {frames} frames"
        f" per turn; ratio {ratio(rate, bare)} (CPU {ratio(bare_cpu, cpu)}, target 0.3)"
    )
    log(
        "  rounds: gateway "
        + " / ".join(f"{r:,}" for r in result["turns_per_s_rounds"])
        + " turns/s ("
        + " / ".join(f"{c:.3f}" for c in result["server_cpu_ms_rounds"])
        + " ms CPU), bare "
        + " / ".join(f"{r:,}" for r in floor["turns_per_s_rounds"])
        + " turns/s ("
        + " / ".join(f"{c:.3f}" for c in floor["server_cpu_ms_rounds"])
        + " ms CPU); ratios "
        + " / ".join(f"{r:.3f}" for r in ratios)
    )
    by_thread = result["server_thread_cpu_ms_per_turn"]
    voluntary, involuntary = result["server_switches_per_turn"]
    bare_voluntary, bare_involuntary = floor["server_switches_per_turn"]
    log(
        "  gateway CPU a turn by thread: "
        + ", ".join(f"{name} {ms:.2f} ms" for name, ms in by_thread.items())
        + f"; context switches a turn {voluntary:.1f} voluntary, {involuntary:.1f}"
        f" involuntary (bare {bare_voluntary:.1f}, {bare_involuntary:.1f})"
    )
    adm, done, fan = result["admitted"], result["completed"], result["fanout"]
    log(
        f"  submit → admitted p50 {adm['p50_ms']:.1f} / p99 {adm['p99_ms']:.1f} ms (target p99"
        f" ≤ 20; bare p99 {floor['admitted']['p99_ms']:.1f}); submit → completed p50"
        f" {done['p50_ms']:.1f} / p99 {done['p99_ms']:.1f} ms; fan-out to 8 clients p99"
        f" {fan['p99_ms']:.2f} ms (target ≤ 10); load average {os.getloadavg()[0]:.1f}"
    )
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
        rounds=rounds,
        round_ratios=[round(r, 3) for r in ratios],
        turns_per_s_rounds=result["turns_per_s_rounds"],
        floor_turns_per_s_rounds=floor["turns_per_s_rounds"],
        gateway_cpu_ms_rounds=result["server_cpu_ms_rounds"],
        bare_cpu_ms_rounds=floor["server_cpu_ms_rounds"],
        frames_per_turn=frames,
        gateway_cpu_ms_per_turn=round(cpu, 3),
        bare_server_cpu_ms_per_turn=round(bare_cpu, 3),
        gateway_thread_cpu_ms_per_turn=by_thread,
        gateway_switches_per_turn=result["server_switches_per_turn"],
        bare_switches_per_turn=floor["server_switches_per_turn"],
        cpu_ratio=ratio(bare_cpu, cpu),
        bare_admitted_p99_ms=floor["admitted"]["p99_ms"],
        bare_completed_p99_ms=floor["completed"]["p99_ms"],
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
        "submit_to_admitted_split",
        value=result["admitted"]["p50_ms"],
        unit="ms p50",
        stages={name: split[name] for name, _ in STAGES if name in split},
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
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="end_to_end: rounds of the gateway and of the floor, alternated (medians)",
    )
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", default="writer,end_to_end,startup")
    parser.add_argument(
        "--trace",
        choices=("off", "wall", "cpu"),
        default="wall",
        help="end_to_end: stamp each admission's stages inside the gateway (wall clock;"
        " cpu: also the loop's and writer's thread CPU clocks, a system call per stamp)",
    )
    args = parser.parse_args()
    if args.quick:
        args.messages, args.turns, args.repeat, args.rounds = 40, 5, 3, 1
    only = set(args.only.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    try:
        if "writer" in only:
            bench_writer(tmp, args.sessions, args.messages)
        if "end_to_end" in only:
            bench_end_to_end(tmp, args.clients, args.turns, args.trace, max(1, args.rounds))
        if "startup" in only:
            bench_startup(tmp, args.repeat)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
