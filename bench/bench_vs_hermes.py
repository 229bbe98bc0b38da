"""Side by side with Hermes Agent 0.19.0: one seeded workload through both stores, same run.

For each size (``--sizes``; quick: 10,000 messages) the workload of ``bench.hermes_workload``
(several sources, tool calls and results, identifiers, emails, URLs, CJK) is written through
Hermes' ``SessionDB`` (in its own virtual environment, ``bench/out/hermes-venv``, installed here
on first use with ``pip install hermes-agent==0.19.0``) and through ``SessionEngine``:

* append messages/s: the last ``--timed`` messages one call each (``SessionDB.append_message``
  / ``SessionEngine.append_message``) on top of the rest, written in bulk first (Hermes through
  its own ``_insert_message_rows``, this project through ``Store`` transactions); floor: a raw
  APSW insert of the same rows, one transaction each, into a table with an FTS5 index;
* bytes per message: pages in use (``dbstat``) over messages, and per table and index;
* search p50/p99 per query class (word, two words, phrase, prefix, identifier, CJK), limit 20,
  the two sides taking turns pass by pass (``bench_search``); floor: a plain scan of every
  message's text for the query (the substring scan);
* recall of identifier and CJK queries (each with 1-300 matches) against the substring scan;
* ``sessions list`` cold start (a real subprocess of each CLI) on a store of ``--sessions``
  sessions; floor: the bare interpreter start of each environment;
* rebuild of the message events, backup import and Hermes migration (this project only) against
  a raw batched insert of the same rows (5,000 per transaction, FTS rows added per batch).

Every figure of a run is measured on one CPU (``one_cpu``), both sides and the floors: the two
cores of these shared machines do not run at one speed.

Run: ``python -m bench.bench_vs_hermes [--quick] [--sizes 10000,100000,1000000]
[--sessions 100000] [--figures append,bytes,search,list,rebuild,import]``.

Kept stores (``--store-dir DIR``, for sizes whose builds take long): the bulk part of each
project's store is built once under ``DIR/vs_<n>/`` (``hermes-bulk/state.db`` through Hermes'
own row insert, resumable: an interrupted build is checked against the workload and
continued; ``ours-bulk.db``, with ``--log-build`` the log then ``rebuild``) and reused by later
runs. Each run copies both bulk stores, times both projects' appends of the last ``--timed``
messages on the copies (and the raw-insert floor), then bytes and search, Hermes' search run
in that same run. ``--build-only`` stops after the builds; ``--publish`` puts the finished
Hermes build into the shared cache.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.common import (
    BENCH_DIR,
    emit,
    latency_summary,
    log,
    machine_info,
    out_dir,
    ratio,
    time_queries,
)
from bench.hermes_cache import HermesCache, cached_list, stamp
from bench.hermes_workload import PER_SESSION, Msg, Workload, recall_queries, substring_scan

BENCH = "vs_hermes"
HERMES_VERSION = "0.19.0"
FIGURES = ("append", "bytes", "search", "list", "rebuild", "import")


# -- the Hermes environment -----------------------------------------------------------------------


def hermes_venv() -> Path:
    """``bench/out/hermes-venv`` with hermes-agent installed (installed now when missing)."""
    venv = out_dir() / "hermes-venv"
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import importlib.metadata as m; print(m.version('hermes-agent'))"]
    if python.exists():
        found = subprocess.run(probe, capture_output=True, text=True, check=False).stdout.strip()
        if found == HERMES_VERSION:
            return venv
    log(f"installing hermes-agent=={HERMES_VERSION} into {venv} (first run only)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", f"hermes-agent=={HERMES_VERSION}"],
        check=True,
    )
    return venv


def hermes_side(venv: Path, args: dict[str, Any], *, progress: bool = False) -> dict[str, Any]:
    """Run one ``bench/hermes_side.py`` operation in the Hermes environment (``progress``: its
    stderr, where long operations report, passes through)."""
    cmd = [str(venv / "bin" / "python"), str(BENCH_DIR / "hermes_side.py"), json.dumps(args)]
    stderr = None if progress else subprocess.PIPE
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, check=False)
    if proc.returncode != 0:
        tail = "(its output above)" if progress else proc.stderr[-4000:]
        raise RuntimeError(f"hermes side {args['op']} failed:\n{tail}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# -- this project's side ------------------------------------------------------------------------


def _draft(m: Msg) -> Any:
    from hermes_es import events as ev

    calls = [
        ev.ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
        for c in m.tool_calls
    ]
    return ev.Message(
        seq=-1,
        uid="",
        role=m.role,
        content=m.content,
        tool_calls=calls,
        tool_call_id=m.tool_call_id,
        tool_name=m.tool_name,
        at=m.at,
    )


def build_engine(path: Path, work: Workload, timed: int, *, append: bool = True) -> dict[str, Any]:
    """Bulk part through Store transactions, then ``timed`` one-call appends (timed; with
    ``append=False`` the store keeps the bulk part only)."""
    from hermes_es.aggregates import session as agg
    from hermes_es.commands.engine import SessionEngine

    engine = SessionEngine(path)
    store = engine.store
    bulk_n = work.n - timed
    messages = work.messages()
    started = time.perf_counter()
    done = 0
    tail: list[Msg] = []
    group: dict[int, list[Msg]] = {}

    def write(group: dict[int, list[Msg]]) -> None:
        with store.transaction() as batch:
            for k, msgs in group.items():
                sid = work.session_id(k)
                state = batch.record(
                    sid,
                    agg.start(sid, at=work.start_at + k * 600.0, source=work.source(k), cwd=""),
                    expected_version=0,
                )
                for m in msgs:  # one event per message, as live appends store them
                    state = batch.record(sid, agg.append(state, [_draft(m)], at=m.at))

    for i, m in enumerate(messages):
        if i >= bulk_n:
            tail.append(m)
            continue
        group.setdefault(m.session, []).append(m)
        if i == bulk_n - 1 or (len(group) >= 100 and (i + 1) % PER_SESSION == 0):
            write(group)
            done += sum(len(v) for v in group.values())
            group = {}
            if done % 200_000 < 1000:
                log(f"  engine bulk {done:,}/{bulk_n:,} ({time.perf_counter() - started:.0f}s)")
    bulk_s = time.perf_counter() - started
    result = _append_tail(engine, work, tail if append else [])
    engine.close()
    return {"bulk_s": bulk_s, **result}


def append_engine(path: Path, work: Workload, timed: int) -> dict[str, Any]:
    """The workload's last ``timed`` messages one ``SessionEngine.append_message`` call each
    (timed) on a store holding the rest."""
    from hermes_es.commands.engine import SessionEngine

    engine = SessionEngine(path)
    bulk_n = work.n - timed
    tail = [m for i, m in enumerate(work.messages()) if i >= bulk_n]
    result = _append_tail(engine, work, tail)
    engine.close()
    return result


def _append_tail(engine: Any, work: Workload, tail: list[Msg]) -> dict[str, Any]:
    seen: set[int] = set()
    append_s = append_cpu = 0.0
    calls: list[float] = []
    clock, cpu = time.perf_counter, time.thread_time
    for m in tail:
        sid = work.session_id(m.session)
        if m.session not in seen:
            seen.add(m.session)
            if not _exists(engine, sid):
                engine.start_session(work.source(m.session), session_id=sid, cwd="")
        fields: dict[str, Any] = {}
        if m.tool_calls:
            fields["tool_calls"] = [
                {
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
                for c in m.tool_calls
            ]
        if m.tool_call_id:
            fields["tool_call_id"] = m.tool_call_id
            fields["tool_name"] = m.tool_name
        t0, c0 = clock(), cpu()
        engine.append_message(sid, m.role, m.content, at=m.at, **fields)
        calls.append(clock() - t0)
        append_s += calls[-1]
        append_cpu += cpu() - c0
    calls.sort()
    return {"append_s": append_s, "append_cpu": append_cpu, "appended": len(tail),
            "median_s": calls[len(calls) // 2] if calls else 0.0,
            "slowest_s": calls[-5:][::-1]}  # fmt: skip


def build_engine_log(
    path: Path, work: Workload, per_txn: int = 50_000, *, limit: int | None = None
) -> dict[str, float]:
    """The log only, ``per_txn`` message events a transaction through the recorder; no
    projections (``rebuild`` then builds them: the rebuild figure). For sizes the per-session
    path cannot reach in a session (5,000,000 messages): the same events, one per message.
    ``limit``: only the workload's first ``limit`` messages (whole sessions)."""
    from eventsourcing.persistence import StoredEvent

    from hermes_es import events as ev
    from hermes_es.aggregates import session as agg
    from hermes_es.aggregates.state import SessionState, apply
    from hermes_es.commands.unit_of_work import Store

    store = Store(path)
    recorder, datastore = store.recorder, store.datastore
    started = time.perf_counter()
    pending: list[StoredEvent] = []
    state: SessionState | None = None
    current = -1

    def queue(sid: str, events: list[Any]) -> None:
        assert state is not None
        for event in events:
            apply(state, event, state.version + 1)
            pending.append(
                StoredEvent(
                    originator_id=sid, originator_version=state.version, topic=event.topic,
                    state=ev.encode(event),
                )
            )  # fmt: skip

    def flush() -> None:
        with datastore.transaction() as conn:
            recorder._insert_events(conn, pending)
        pending.clear()

    for done, m in enumerate(work.messages(), 1):
        if limit is not None and done > limit:
            break
        sid = work.session_id(m.session)
        if m.session != current:
            if len(pending) >= per_txn:
                flush()
            current = m.session
            state = SessionState(session_id=sid)
            queue(sid, agg.start(sid, at=work.start_at + m.session * 600.0,
                                 source=work.source(m.session), cwd=""))  # fmt: skip
        assert state is not None
        queue(sid, agg.append(state, [_draft(m)], at=m.at))
        if done % 500_000 == 0:
            log(f"  engine log {done:,}/{work.n:,} ({time.perf_counter() - started:.0f}s)")
    if pending:
        flush()
    store.close()
    return {"bulk_s": time.perf_counter() - started, "append_s": 0.0, "append_cpu": 0.0,
            "appended": 0}  # fmt: skip


def _exists(engine: Any, sid: str) -> bool:
    rows = engine.store.connection().execute("SELECT 1 FROM sessions WHERE id = ?", (sid,))
    return bool(rows.fetchall())


# -- floors -------------------------------------------------------------------------------------


_FLOOR_SCHEMA = (
    "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
    "CREATE TABLE m (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL,"
    " content TEXT, tool_calls TEXT, tool_call_id TEXT, tool_name TEXT, at REAL NOT NULL);"
    "CREATE INDEX m_session ON m (session_id, at);"
)


def _floor_row(work: Workload, i: int, m: Msg) -> tuple[object, ...]:
    calls = json.dumps(m.tool_calls) if m.tool_calls else None
    return (i + 1, work.session_id(m.session), m.role, m.content, calls, m.tool_call_id,
            m.tool_name, m.at)  # fmt: skip


def _floor_db(path: Path) -> Any:
    import apsw

    from hermes_es.projections.fts import PREFIX_INDEX, register_tokenizer

    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    conn = apsw.Connection(str(path))
    register_tokenizer(conn)
    for statement in _FLOOR_SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement).fetchall()
    conn.execute(
        "CREATE VIRTUAL TABLE m_fts USING fts5(content, content='m', content_rowid='id',"
        f" tokenize='hermes', prefix='{PREFIX_INDEX}')"
    )
    return conn


def floor_batched(
    path: Path, work: Workload, *, fts: bool = True, per_txn: int = 5000, limit: int | None = None
) -> tuple[float, float]:
    """Wall and CPU seconds to insert every workload row (the first ``limit``), ``per_txn`` a
    transaction (FTS rows added per batch by one ``INSERT … SELECT``)."""
    conn = _floor_db(path)
    insert = "INSERT INTO m VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    seconds = cpu_seconds = 0.0
    rows: list[tuple[object, ...]] = []

    def flush() -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.thread_time()
        with conn:
            conn.executemany(insert, rows)
            if fts:
                conn.execute(
                    "INSERT INTO m_fts (rowid, content) SELECT id, content FROM m WHERE id >= ?",
                    (rows[0][0],),
                )
        return time.perf_counter() - t0, time.thread_time() - c0

    for i, m in enumerate(work.messages()):
        if limit is not None and i >= limit:
            break
        rows.append(_floor_row(work, i, m))
        if len(rows) >= per_txn:
            wall, cpu = flush()
            seconds, cpu_seconds = seconds + wall, cpu_seconds + cpu
            rows = []
    if rows:
        wall, cpu = flush()
        seconds, cpu_seconds = seconds + wall, cpu_seconds + cpu
    conn.close()
    return seconds, cpu_seconds


def floor_append(path: Path, work: Workload, count: int) -> tuple[float, float]:
    """Wall and CPU seconds for ``count`` raw inserts (row + FTS row), one transaction each."""
    conn = _floor_db(path)
    seconds = cpu_seconds = 0.0
    clock, cpu = time.perf_counter, time.thread_time
    for i, m in enumerate(work.messages()):
        if i >= count:
            break
        row = _floor_row(work, i, m)
        t0, c0 = clock(), cpu()
        with conn:
            conn.execute("INSERT INTO m VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
            conn.execute("INSERT INTO m_fts (rowid, content) VALUES (?, ?)", (row[0], row[3]))
        seconds += clock() - t0
        cpu_seconds += cpu() - c0
    conn.close()
    return seconds, cpu_seconds


# -- bytes ----------------------------------------------------------------------------------------


def dbstat(path: Path) -> dict[str, int]:
    """Bytes in use per table or index (``dbstat``: page payload + overhead, not free pages)."""
    import apsw

    conn = apsw.Connection(
        f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_READONLY
    )
    try:
        rows = conn.execute(
            "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
        ).fetchall()
    finally:
        conn.close()
    return {str(name): int(size) for name, size in rows}


def _fts_total(stat: dict[str, int], prefix: str) -> int:
    return sum(v for k, v in stat.items() if k.startswith(prefix))


# -- search -------------------------------------------------------------------------------------


def query_classes(work: Workload, recall: dict[str, list[str]]) -> dict[str, list[str]]:
    """Queries per class: frequent and spread words, pairs, phrases, prefixes, ids, CJK."""
    gen = work.gen
    top = gen.words[:4]
    spread = [gen.word_at_quantile(q) for q in (0.1, 0.3, 0.5, 0.7, 0.9, 0.99)]
    words = top + spread + [gen.words[200 + k * 997] for k in range(5)]
    two = [f"{a} {b}" for a, b in zip(words, reversed(words), strict=True)]
    phrases = [f'"{a} {b}"' for a, b in zip(gen.words[:6], gen.words[1:7], strict=True)] + [
        f'"{gen.word_at_quantile(q)} {gen.word_at_quantile(q / 2)}"' for q in (0.3, 0.5, 0.7, 0.9)
    ]
    prefixes = [w[:3] + "*" for w in words if len(w) >= 3] + ["co*", "re*"]
    identifiers = ["chat-send", "snake_case_name", "getUserById", "HTTP_404", "v1.2.3"]
    identifiers += ["src/main.py", "tool_call_id", "gpt-4o", *recall["identifier"]]
    cjk = ["模型", "全文搜索", "検索", "세션", *recall["cjk"]]
    return {
        "word": words,
        "two_words": two,
        "phrase": phrases,
        "prefix": prefixes,
        "identifier": identifiers,
        "cjk": cjk,
    }


class HermesSearch:
    """Hermes' ``search_messages`` in its environment, one pass over a list of queries at a
    time (``hermes_side.search_serve``), so that this side's passes run in between."""

    def __init__(self, venv: Path, db: Path) -> None:
        args = json.dumps({"op": "search_serve", "db": str(db)})
        cmd = [str(venv / "bin" / "python"), str(BENCH_DIR / "hermes_side.py"), args]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self._read()  # {"ready": true}: the store is open

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise RuntimeError(f"hermes side search_serve exited ({self.proc.returncode})")
        value: dict[str, Any] = json.loads(line)
        return value

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def warm(self, queries: list[str]) -> None:
        self._ask({"warm": queries})

    def timed(self, queries: list[str]) -> tuple[list[float], list[float]]:
        """Wall and CPU seconds of each query, one pass."""
        got = self._ask({"time": queries})
        return got["wall"], got["cpu"]

    def finish(self, recall: list[str]) -> dict[str, Any]:
        """The recall queries' row ids and the sanitizer's view of every query; the end."""
        result = self._ask({"recall": recall})
        self.proc.wait(timeout=60)
        return result


@contextlib.contextmanager
def one_cpu() -> Iterator[int | None]:
    """Run this process, and the processes it starts, on one CPU (the lowest it may use; None
    where affinity can't be set), and put its CPUs back after. The cores of these shared
    virtual machines do not run at one speed: the same search passes took 1.6 times as long on
    one core as on the other, for minutes at a time, so two sides left to the scheduler can land
    on different cores and measure the cores instead of the code."""
    get = getattr(os, "sched_getaffinity", None)
    put = getattr(os, "sched_setaffinity", None)
    if get is None or put is None:
        yield None
        return
    before = get(0)
    cpu = min(before)
    put(0, {cpu})
    try:
        yield cpu
    finally:
        put(0, before)


def hermes_search(
    venv: Path, cache: HermesCache, work: Workload, texts: list[str], rounds: int
) -> tuple[dict[str, Any], dict[str, list[str]], dict[str, list[str]]]:
    """The Hermes side's search alone (``--hermes-only``): its classes' passes one after the
    other, recorded in the cache entry."""
    recall = recall_queries(texts)
    classes = query_classes(work, recall)
    recall_list = recall["identifier"] + recall["cjk"]
    log(f"  hermes search: {sum(map(len, classes.values()))} queries, {len(recall_list)} recall")
    side = HermesSearch(venv, cache.db)
    times: dict[str, list[float]] = {}
    cpu_times: dict[str, list[float]] = {}
    for name, queries in classes.items():
        side.warm(queries)
        times[name], cpu_times[name] = [], []
        for _ in range(rounds):
            wall, cpu = side.timed(queries)
            times[name] += wall
            cpu_times[name] += cpu
    result = {"times": times, "cpu_times": cpu_times, **side.finish(recall_list)}
    request = {"classes": classes, "rounds": rounds, "recall": recall_list}
    cache.save_search(request, stamp(result))
    return {**stamp(result), "cached": False}, classes, recall


def bench_search(
    venv: Path | None,
    cache: HermesCache | None,
    work: Workload,
    ours: Path,
    texts: list[str],
    rounds: int,
) -> None:
    """Latency per class on both stores, recall of identifier and CJK queries, scan floor.

    The two sides take turns on one CPU (``one_cpu``): for each class a warm pass each, then
    ``rounds`` rounds of one timed pass each (Hermes' in its own process, the order swapped
    every other round), so a load that comes and goes during the run weighs on both alike (a
    run that timed every Hermes class first and this side's after it, each on whichever core
    the scheduler gave it, moved a class's ratio by a factor of two between runs)."""
    with one_cpu() as cpu:
        _bench_search(venv, cache, work, ours, texts, rounds, cpu)


def _bench_search(
    venv: Path | None,
    cache: HermesCache | None,
    work: Workload,
    ours: Path,
    texts: list[str],
    rounds: int,
    core: int | None,
) -> None:
    from hermes_es.projections.catalog import connect
    from hermes_es.queries.search import search_messages

    recall = recall_queries(texts)
    classes = query_classes(work, recall)
    recall_list = recall["identifier"] + recall["cjk"]
    side = HermesSearch(venv, cache.db) if venv and cache else None
    if side:
        log(f"  hermes search: {sum(map(len, classes.values()))} queries, in turns with ours")
    log(f"  engine search: {sum(map(len, classes.values()))} queries")
    conn = connect(ours)
    # The ids the engine's hits map back to: (session, seq) -> message index.
    seq0 = int(conn.execute("SELECT MIN(seq) FROM messages").fetchall()[0][0])
    n = work.n
    scan_queries = [q.strip('"').rstrip("*") for q in classes["two_words"][:3]]
    scan = time_queries(lambda q: substring_scan(texts, q), scan_queries, 1)
    h: dict[str, Any] | None = None
    if side:
        h = {"times": {}, "cpu_times": {}}

    def ours_pass(queries: list[str]) -> tuple[list[float], list[float]]:
        return _time_wall_cpu(lambda q: search_messages(conn, q, limit=20), queries, 1)

    passes: dict[str, tuple[list[float], list[float]]] = {}
    for name, queries in classes.items():
        if side:
            side.warm(queries)
        for q in queries:
            search_messages(conn, q, limit=20)
        wall, cpu, h_wall, h_cpu = [], [], [], []
        for r in range(rounds):
            if side and r % 2 == 1:
                theirs_w, theirs_c = side.timed(queries)
                h_wall += theirs_w
                h_cpu += theirs_c
            mine_w, mine_c = ours_pass(queries)
            wall += mine_w
            cpu += mine_c
            if side and r % 2 == 0:
                theirs_w, theirs_c = side.timed(queries)
                h_wall += theirs_w
                h_cpu += theirs_c
        passes[name] = wall, cpu
        if h is not None:
            h["times"][name], h["cpu_times"][name] = h_wall, h_cpu
    if side and h is not None and cache is not None:
        h.update(side.finish(recall_list))
        h = stamp(h)
        cache.save_search({"classes": classes, "rounds": rounds, "recall": recall_list}, h)
        h["cached"] = False
    for name, queries in classes.items():
        wall, cpu = passes[name]
        mine, mine_cpu = latency_summary(wall), latency_summary(cpu)
        hers = latency_summary(h["times"][name]) if h else {"p50_ms": None, "p99_ms": None}
        hers_cpu = latency_summary(h["cpu_times"][name]) if h else {"p50_ms": None}
        pairs = _query_pairs(queries, cpu, h["cpu_times"][name] if h else None)
        asked = [
            pair
            for q, pair in zip(queries, pairs, strict=True)
            if not h or _same_terms(q, h.get("sanitized", {}).get(q, q))
        ]
        emit(
            BENCH, f"search_{name}", value=mine["p50_ms"], unit="ms p50", p99_ms=mine["p99_ms"],
            hermes_p50_ms=hers["p50_ms"], hermes_p99_ms=hers["p99_ms"],
            vs_hermes=ratio(mine["p50_ms"], hers["p50_ms"]) if h else None,
            cpu_p50_ms=mine_cpu["p50_ms"], hermes_cpu_p50_ms=hers_cpu["p50_ms"],
            vs_hermes_cpu=ratio(mine_cpu["p50_ms"], hers_cpu["p50_ms"]) if h else None,
            cpu_best_p50_ms=_median_of(pairs, 0), hermes_cpu_best_p50_ms=_median_of(pairs, 1),
            faster_queries=sum(1 for a, b in pairs if b is not None and a <= b),
            as_asked_queries=len(asked), as_asked_cpu_best_p50_ms=_median_of(asked, 0),
            hermes_as_asked_cpu_best_p50_ms=_median_of(asked, 1),
            per_query={q: list(pair) for q, pair in zip(queries, pairs, strict=True)},
            hermes_sanitized={q: t for q, t in (h or {}).get("sanitized", {}).items()
                              if q in queries and not _same_terms(q, t)},
            hermes_cached=h["cached"] if h else None,
            hermes_measured_at=h["measured_at"] if h else None,
            hermes_loadavg=h["loadavg"][0] if h else None,
            floor=round(statistics.median(scan) * 1000, 3), floor_kind="substring scan ms",
            target="p50 <= Hermes; p99 <= 50 ms at 5M",
            ok=(not h or mine["p50_ms"] <= hers["p50_ms"]) and mine["p99_ms"] <= 50,
            queries=len(queries), messages=n, cpu=core,
        )  # fmt: skip
    for name in ("identifier", "cjk"):
        mine_r: list[float] = []
        hers_r: list[float] = []
        for q in recall[name]:
            truth = set(substring_scan(texts, q))
            hits = search_messages(conn, q, limit=1000)
            got = {int(x.session_id.rsplit("_", 1)[1]) * PER_SESSION + x.seq - seq0 for x in hits}
            mine_r.append(len(truth & got) / len(truth))
            if h:
                hers_r.append(len(truth & {i - 1 for i in h["found"][q]}) / len(truth))
        value = min(mine_r) if mine_r else float("nan")
        emit(
            BENCH, f"recall_{name}", value=value, unit="min recall", mean=statistics.fmean(mine_r),
            hermes=min(hers_r) if hers_r else None,
            hermes_mean=statistics.fmean(hers_r) if hers_r else None, queries=len(mine_r),
            target=1.0, ok=value == 1.0, messages=n,
        )  # fmt: skip
    conn.close()


def _query_pairs(
    queries: list[str], cpu: list[float], hermes_cpu: list[float] | None
) -> list[tuple[float, float | None]]:
    """Per query (in class order), the best CPU ms of its passes here and on the Hermes side
    (both time the class's queries in the same order, pass after pass): like with like, where
    a class's p50 mixes queries the two sides answer differently."""
    n = len(queries)

    def best(times: list[float], i: int) -> float:
        return round(min(times[i::n]) * 1000, 4)

    return [(best(cpu, i), best(hermes_cpu, i) if hermes_cpu else None) for i in range(n)]


def _same_terms(query: str, sanitized: str) -> bool:
    """Whether Hermes searched the words asked (its sanitizer may quote them, or drop a
    leading or trailing ``and``/``or``/``not``)."""
    return re.findall(r"\w+", query.lower()) == re.findall(r"\w+", sanitized.lower())


def _median_of(pairs: list[tuple[float, float | None]], side: int) -> float | None:
    values = [v for p in pairs if (v := p[side]) is not None]
    return round(statistics.median(values), 4) if values else None


def _time_wall_cpu(
    fn: Callable[[str], object], queries: list[str], rounds: int
) -> tuple[list[float], list[float]]:
    """Wall and this thread's CPU seconds per call of ``fn(query)``, ``rounds`` passes."""
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(rounds):
        for q in queries:
            t0, c0 = time.perf_counter(), time.thread_time()
            fn(q)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
    return wall, cpu


# -- sessions list ------------------------------------------------------------------------------


def _median_wall(cmd: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _child_cpu() -> float:
    """CPU seconds (user + system) of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def interleaved(
    cmds: dict[str, tuple[list[str], dict[str, str]]], runs: int
) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds of each command, run in turns (one of each per round, the
    order reversed every other round), so a load that comes and goes weighs on all alike."""
    wall: dict[str, list[float]] = {name: [] for name in cmds}
    cpu: dict[str, list[float]] = {name: [] for name in cmds}
    names = list(cmds)
    for k in range(runs):
        for name in names if k % 2 == 0 else reversed(names):
            cmd, env = cmds[name]
            t0, c0 = time.perf_counter(), _child_cpu()
            subprocess.run(cmd, env=env, check=True, capture_output=True)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(_child_cpu() - c0)
    return {n: (statistics.median(wall[n]), statistics.median(cpu[n])) for n in names}


def compile_bytecode() -> None:
    """Write the bytecode of every ``hermes_es`` module, as ``pip install`` does (Hermes' own
    environment has it from its install). An editable checkout run with
    ``PYTHONDONTWRITEBYTECODE`` set never writes it, so each start compiled every module it
    imports again: most of a cold start."""
    import compileall

    import hermes_es

    compileall.compile_dir(Path(hermes_es.__file__).parent, quiet=1)


def build_list_store(path: Path, n: int) -> None:
    """``n`` sessions of two messages through Store transactions, 500 sessions each."""
    from hermes_es import events as ev
    from hermes_es.aggregates import session as agg
    from hermes_es.commands.unit_of_work import Store

    store = Store(path)
    for first in range(0, n, 500):
        with store.transaction() as batch:
            for k in range(first, min(first + 500, n)):
                sid = f"list_{k:08d}"
                at = 1_700_000_000.0 + k * 60.0
                state = batch.record(
                    sid, agg.start(sid, at=at, source="cli", title=f"bench session {k}", cwd="")
                )
                drafts = [
                    ev.Message(seq=-1, uid="", role="user", content=f"question {k}"),
                    ev.Message(seq=-1, uid="", role="assistant", content=f"answer {k}"),
                ]
                batch.record(sid, agg.append(state, drafts, at=at + 1))
    store.close()


def _hermes_list_home(venv: Path, sessions: int) -> Path:
    """The Hermes profile holding ``sessions`` sessions (built through its SessionDB once)."""
    theirs = out_dir() / f"vs_list_{sessions}" / "hermes"
    if not (theirs / "state.db").exists():
        shutil.rmtree(theirs, ignore_errors=True)
        theirs.mkdir(parents=True)
        log(f"  Hermes list store: {sessions:,} sessions")
        hermes_side(venv, {"op": "sessions", "db": str(theirs / "state.db"), "n": sessions})
    return theirs


def hermes_list(venv: Path, sessions: int, runs: int, *, fresh: bool = False) -> dict[str, Any]:
    """Hermes' ``sessions list`` cold start and bare interpreter start (cached)."""
    kept = cached_list(HERMES_VERSION, sessions, runs)
    if kept.exists() and not fresh:
        h: dict[str, Any] = json.loads(kept.read_text())
        log(f"  hermes list: cached ({h['measured_at']}, load {h['loadavg'][0]})")
        return {**h, "cached": True}
    theirs = _hermes_list_home(venv, sessions)
    env = {**os.environ, "HERMES_HOME": str(theirs)}
    their_cmd = [str(venv / "bin" / "hermes"), "sessions", "list"]
    _median_wall(their_cmd, env, 2)  # page cache, .pyc files
    h = stamp(
        {
            "floor_s": _median_wall([str(venv / "bin" / "python"), "-c", "pass"], env, runs),
            "list_s": _median_wall(their_cmd, env, runs),
        }
    )
    kept.write_text(json.dumps(h))
    return {**h, "cached": False}


def bench_list(venv: Path, sessions: int, runs: int) -> None:
    """Cold start of ``hermes sessions list`` in both projects, beside bare interpreter starts
    of each environment: the four commands run in turns, wall and CPU medians of each."""
    compile_bytecode()
    home = out_dir() / f"vs_list_{sessions}"
    ours = home / "ours"
    if not (ours / "state.db").exists():
        shutil.rmtree(ours, ignore_errors=True)
        ours.mkdir(parents=True)
        log(f"  list store: {sessions:,} sessions")
        build_list_store(ours / "state.db", sessions)
    theirs = _hermes_list_home(venv, sessions)
    env = dict(os.environ)
    our_cmd = [sys.executable, "-c", "from hermes_es.cli import main; main()", "sessions", "list"]
    their_cmd = [str(venv / "bin" / "hermes"), "sessions", "list"]
    cmds = {
        "ours": (our_cmd, {**env, "HERMES_HOME": str(ours)}),
        "hermes": (their_cmd, {**env, "HERMES_HOME": str(theirs)}),
        "floor": ([sys.executable, "-c", "pass"], env),
        "hermes_floor": ([str(venv / "bin" / "python"), "-c", "pass"], env),
    }  # fmt: skip
    interleaved(cmds, 2)  # page cache, .pyc files
    t = interleaved(cmds, runs)
    (mine, mine_cpu), (hers, hers_cpu) = t["ours"], t["hermes"]
    emit(
        BENCH, "list_cold_start", value=mine * 1000, unit="ms", hermes_ms=hers * 1000,
        vs_hermes=ratio(mine, hers), cpu_ms=mine_cpu * 1000, hermes_cpu_ms=hers_cpu * 1000,
        cpu_vs_hermes=ratio(mine_cpu, hers_cpu), floor=t["floor"][0] * 1000,
        floor_cpu_ms=t["floor"][1] * 1000, ratio=ratio(mine, t["floor"][0]),
        hermes_floor_ms=t["hermes_floor"][0] * 1000,
        hermes_floor_cpu_ms=t["hermes_floor"][1] * 1000,
        target="<= 0.4x Hermes at 100k sessions", ok=mine <= 0.4 * hers, sessions=sessions,
        runs=runs,
    )  # fmt: skip


# -- rebuild, import, migration ------------------------------------------------------------------


def _timed_call(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()``'s result, wall seconds and this thread's CPU seconds."""
    t0, c0 = time.perf_counter(), time.thread_time()
    result = fn()
    return result, time.perf_counter() - t0, time.thread_time() - c0


def bench_rebuild(
    ours: Path, work: Workload, floor: tuple[float, float], messages: int | None = None
) -> tuple[float, float]:
    """Rebuild every projection of the engine store (of ``messages``, default all) against
    the batched floor of the same rows; the rebuild's wall and CPU seconds."""
    from hermes_es.projections.rebuild import rebuild

    n = work.n if messages is None else messages
    events, took, cpu = _timed_call(lambda: rebuild(ours))
    emit(
        BENCH, "rebuild", value=events / took, unit="events/s", floor=n / floor[0],
        ratio=round(floor[0] / took, 3), cpu_ratio=round(floor[1] / cpu, 3), target=0.8,
        ok=floor[0] / took >= 0.8, events=events, messages=n,
    )  # fmt: skip
    return took, cpu


def bench_import(
    ours: Path, theirs: Path | None, work: Workload, floors: dict[str, tuple[float, float]]
) -> None:
    """Backup import and Hermes migration into fresh stores, against the raw batched insert."""
    from hermes_es.commands.engine import SessionEngine
    from hermes_es.commands.export import ExportOptions, export_sessions
    from hermes_es.commands.importing import import_backups
    from hermes_es.commands.migrate_hermes import import_hermes_db

    scratch = out_dir() / f"vs_import_{work.n}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    engine = SessionEngine(ours)
    conn = engine.store.connection()
    ids = [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY id")]
    export_sessions(conn, scratch / "backup", ids, ExportOptions(fmt="jsonl", max_messages=0))
    engine.close()
    target = SessionEngine(scratch / "imported.db")
    _, took, cpu = _timed_call(
        lambda: import_backups(target.store, [scratch / "backup"], max_messages=0)
    )
    target.close()
    (fts, fts_cpu), (plain, _) = floors["batched"], floors["batched_plain"]
    emit(
        BENCH, "import_backup", value=work.n / took, unit="msgs/s", floor=work.n / fts,
        ratio=round(fts / took, 3), cpu_ratio=round(fts_cpu / cpu, 3), plain_floor=work.n / plain,
        plain_ratio=round(plain / took, 3), target=0.4, ok=fts / took >= 0.4, messages=work.n,
    )  # fmt: skip
    if theirs is None:
        shutil.rmtree(scratch, ignore_errors=True)
        return
    target = SessionEngine(scratch / "migrated.db")
    report, took, cpu = _timed_call(lambda: import_hermes_db(target.store, theirs, max_messages=0))
    target.close()
    emit(
        BENCH, "migrate_hermes", value=report.imported_messages / took, unit="msgs/s",
        floor=work.n / fts, ratio=round(fts / took, 3), cpu_ratio=round(fts_cpu / cpu, 3),
        plain_floor=work.n / plain,
        plain_ratio=round(plain / took, 3), target=0.4, ok=fts / took >= 0.4,
        messages=report.imported_messages, sessions=report.imported_sessions,
    )  # fmt: skip
    shutil.rmtree(scratch, ignore_errors=True)


# -- one size -------------------------------------------------------------------------------------


def hermes_build(venv: Path, cache: HermesCache, work: Workload, timed: int) -> dict[str, Any]:
    """The Hermes side's build result and bytes (from the cache when it holds them)."""
    found = cache.build()
    if found is not None:
        log(f"{work.n:,} messages: Hermes build cached ({found['measured_at']},"
            f" load {found['loadavg'][0]}): {cache.db}")  # fmt: skip
        return {**found, "cached": True}
    log(f"{work.n:,} messages: Hermes build ({timed:,} timed appends) into {cache.db}")
    db = cache.start_build()
    result = hermes_side(
        venv, {"op": "build", "db": str(db), "n": work.n, "seed": work.seed, "timed": timed}
    )
    result["dbstat"] = dbstat(db)
    cache.save_build(result)
    log(f"  hermes: bulk {result['bulk_s']:.1f}s, appends {result['append_s']:.1f}s")
    return {**stamp(result), "cached": False}


def _wait_for(ready: Callable[[], bool], seconds: float, what: Path) -> bool:
    """Poll ``ready`` every 20 s for up to ``seconds``; whether it became true."""
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() >= deadline:
            return False
        log(f"  waiting for {what} (another run fills it)")
        time.sleep(20)
    return True


def run_hermes_only(venv: Path, n: int, args: argparse.Namespace) -> None:
    """Fill the cache with the Hermes side at ``n`` messages (build, bytes, search)."""
    work = Workload(n, args.seed)
    timed = min(args.timed, n // 5)
    cache = HermesCache(HERMES_VERSION, work, timed, fresh=args.hermes_fresh)
    hermes_build(venv, cache, work, timed)
    if "search" in args.figures:
        texts = [m.content for m in work.messages()]
        hermes_search(venv, cache, work, texts, args.rounds)
    log(f"{n:,} messages: Hermes side cached in {cache.folder}")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def emit_append(
    mine: dict[str, Any],
    h: dict[str, Any] | None,
    floor: tuple[float, float],
    timed: int,
    n: int,
) -> None:
    """The append figure: both projects' timed appends and the raw-insert floor."""
    mine_rate = timed / mine["append_s"]
    hers_rate = timed / h["append_s"] if h else None
    floor_wall, floor_cpu = floor
    emit(
        BENCH, "append", value=mine_rate, unit="msgs/s", hermes=hers_rate,
        vs_hermes=ratio(mine_rate, hers_rate) if hers_rate else None,
        vs_hermes_cpu=ratio(h["append_cpu"], mine["append_cpu"]) if h else None,
        cpu_s=mine["append_cpu"], hermes_cpu_s=h["append_cpu"] if h else None,
        median_ms=_ms(mine.get("median_s")), hermes_median_ms=_ms(h.get("median_s")) if h else None,
        slowest_ms=[_ms(x) for x in mine.get("slowest_s", [])],
        hermes_slowest_ms=[_ms(x) for x in h.get("slowest_s", [])] if h else None,
        hermes_cached=h["cached"] if h else None,
        hermes_measured_at=h["measured_at"] if h else None,
        hermes_loadavg=h["loadavg"][0] if h else None,
        floor=timed / floor_wall, ratio=round(floor_wall / mine["append_s"], 3),
        cpu_ratio=round(floor_cpu / mine["append_cpu"], 3),
        target=">= 3x Hermes", ok=mine_rate >= 3 * hers_rate if hers_rate else None,
        appended=timed, messages=n,
    )  # fmt: skip


def emit_bytes(
    ours: Path, h: dict[str, Any] | None, floor_db: Path, work: Workload, floor_rows: int = 0
) -> None:
    """Bytes per message of both stores (``dbstat``), per table and index, and of the floor
    (which holds ``floor_rows`` rows, default all)."""
    n = work.n
    stat_mine = dbstat(ours)
    stat_hers: dict[str, int] = h["dbstat"] if h else {}
    mine_b, hers_b = sum(stat_mine.values()) / n, sum(stat_hers.values()) / n
    floor_stat = dbstat(floor_db)
    emit(
        BENCH, "bytes_per_message", value=mine_b, unit="B/msg", hermes=hers_b,
        vs_hermes=ratio(mine_b, hers_b) if h else None,
        floor=sum(floor_stat.values()) / (floor_rows or n),
        floor_kind="rows + FTS, no log", target="<= 0.5x Hermes",
        ok=mine_b <= 0.5 * hers_b if h else None,
        messages=n, text_bytes=sum(len(m.content.encode()) for m in work.messages()) / n,
    )  # fmt: skip
    emit(BENCH, "bytes_by_table", value=n, unit="messages",
         engine={k: round(v / n, 1) for k, v in stat_mine.items()},
         hermes={k: round(v / n, 1) for k, v in stat_hers.items()})  # fmt: skip


# -- kept stores (--store-dir) ---------------------------------------------------------------------


def _copy_store(src: Path, dst: Path) -> None:
    """``src`` (an SQLite file with no writer, its WAL if any) copied to ``dst``."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(str(dst) + suffix).unlink(missing_ok=True)
    for suffix in ("", "-wal"):
        if Path(str(src) + suffix).exists():
            shutil.copyfile(str(src) + suffix, str(dst) + suffix)


def _checkpoint(path: Path) -> None:
    """Fold ``path``'s WAL into the file (a kept store is then one file)."""
    import apsw

    conn = apsw.Connection(str(path))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


def hermes_bulk(venv: Path, root: Path, work: Workload, timed: int) -> dict[str, Any]:
    """The kept Hermes store of the bulk part (``root/hermes-bulk``): built when its
    ``bulk.json`` is missing, continuing an interrupted build (checked against the workload
    by ``hermes_side.py bulk``), else read."""
    folder = root / "hermes-bulk"
    marker = folder / "bulk.json"
    if marker.exists():
        found: dict[str, Any] = json.loads(marker.read_text())
        log(f"{work.n:,} messages: kept Hermes bulk store ({found['measured_at']}): {folder}")
        return found
    folder.mkdir(parents=True, exist_ok=True)
    log(f"{work.n:,} messages: Hermes bulk store (resumable) into {folder}")
    result = hermes_side(
        venv,
        {"op": "bulk", "db": str(folder / "state.db"), "n": work.n, "seed": work.seed,
         "timed": timed, "resume": True},
        progress=True,
    )  # fmt: skip
    result = stamp(result)
    tmp = folder / "bulk.json.tmp"
    tmp.write_text(json.dumps(result))
    tmp.replace(marker)
    log(f"  hermes bulk: {result['bulk_s']:.0f}s (resumed from {result['resumed_from']:,})")
    return result


def engine_bulk(root: Path, work: Workload, timed: int, log_build: bool) -> dict[str, Any]:
    """The kept engine store of the bulk part (``root/ours-bulk.db``) and the batched floor
    of the same rows: built when ``ours-bulk.json`` is missing (the log then ``rebuild``
    with ``log_build``, emitting the rebuild figure), else read."""
    marker = root / "ours-bulk.json"
    db = root / "ours-bulk.db"
    if marker.exists():
        found: dict[str, Any] = json.loads(marker.read_text())
        log(f"{work.n:,} messages: kept engine bulk store ({found['measured_at']}): {db}")
        return found
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    bulk_n = work.n - timed
    result: dict[str, Any] = {"messages": bulk_n, "log_build": log_build}
    if log_build:
        log(f"{work.n:,} messages: engine log of the first {bulk_n:,}, then rebuild")
        result["build_s"] = build_engine_log(db, work, limit=bulk_n)["bulk_s"]
    else:
        log(f"{work.n:,} messages: engine bulk of the first {bulk_n:,}")
        result["build_s"] = build_engine(db, work, timed, append=False)["bulk_s"]
    log(f"  engine: {result['build_s']:.0f}s; batched floor of the same rows")
    floor = floor_batched(root / "floor_batched.db", work, limit=bulk_n)
    result["floor_s"], result["floor_cpu"] = floor
    if log_build:
        log(f"  floor: {floor[0]:.0f}s; rebuild (builds the projections)")
        result["rebuild_s"], result["rebuild_cpu"] = bench_rebuild(db, work, floor, bulk_n)
    _checkpoint(db)
    result = stamp(result)
    tmp = root / "ours-bulk.json.tmp"
    tmp.write_text(json.dumps(result))
    tmp.replace(marker)
    return result


def publish_hermes(cache: HermesCache, db: Path, build: dict[str, Any]) -> None:
    """Put a complete Hermes build (``db`` and its ``build.json``) into the shared cache
    under ``cache.key``: copied under a temporary name, then renamed into place, so no reader
    sees half an entry. An incomplete entry there (no ``build.json``: an interrupted build) is
    renamed aside to ``<key>.partial-<time>``, not removed."""
    if cache.build() is not None:
        return
    parent = cache.folder.parent
    tmp = parent / f"{cache.key}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log(f"  publishing the Hermes build to {cache.folder}")
    _copy_store(db, tmp / "state.db")  # with its WAL, if a writer left one
    (tmp / "build.json").write_text(json.dumps(build))
    if cache.folder.exists():
        aside = parent / f"{cache.key}.partial-{time.strftime('%Y%m%dT%H%M%S')}"
        cache.folder.rename(aside)
        log(f"  the incomplete entry there moved aside to {aside}")
    tmp.rename(cache.folder)


def run_kept(venv: Path | None, n: int, args: argparse.Namespace) -> None:
    """Every figure but import at ``n`` messages, on stores kept under ``--store-dir``: the
    bulk part of each project is built once (or continued) and kept; each run copies both
    bulk stores, times both projects' appends of the last ``--timed`` messages on the copies,
    then measures bytes and search (Hermes' search run now, never from the cache)."""
    figures = set(args.figures)
    root = Path(args.store_dir) / f"vs_{n}"
    root.mkdir(parents=True, exist_ok=True)
    work = Workload(n, args.seed)
    timed = min(args.timed, n // 5)
    log(f"{n:,} messages: generating the workload once (kept stores in {root})")
    work.cache()
    if args.hermes_wait:  # another run (--build-only) may be building them
        for marker in (root / "hermes-bulk" / "bulk.json", root / "ours-bulk.json"):
            _wait_for(marker.exists, args.hermes_wait, marker)
    hb = hermes_bulk(venv, root, work, timed) if venv else None
    ob = engine_bulk(root, work, timed, args.log_build)
    if args.build_only:
        log(f"{n:,} messages: kept bulk stores ready in {root}")
        return
    ours, theirs = root / "ours.db", root / "hermes" / "state.db"
    log("  copying the bulk stores; timed appends (Hermes, then this project, then the floor)")
    _copy_store(root / "ours-bulk.db", ours)
    h: dict[str, Any] | None = None
    if venv and hb:
        _copy_store(root / "hermes-bulk" / "state.db", theirs)
        tail_file = root / "hermes" / "tail.json"
        tail = [m for i, m in enumerate(work.messages()) if i >= n - timed]
        tail_file.write_text(json.dumps([dataclasses.asdict(m) for m in tail]))
        result = hermes_side(
            venv,
            {"op": "append", "db": str(theirs), "n": n, "seed": work.seed, "timed": timed,
             "writes": hb["writes"], "tail_file": str(tail_file)},
        )  # fmt: skip
        result["dbstat"] = dbstat(theirs)
        h = {**stamp(result), "bulk_s": hb["bulk_s"], "resumed_from": hb["resumed_from"]}
    mine = append_engine(ours, work, timed)
    floor = floor_append(root / "floor_append.db", work, timed)
    h_fig = {**h, "cached": False} if h else None
    if "append" in figures:
        emit_append(mine, h_fig, floor, timed, n)
    if "bytes" in figures:
        emit_bytes(ours, h_fig, root / "floor_batched.db", work, int(ob["messages"]))
    live: HermesCache | None = None
    if venv and h:
        live = HermesCache(HERMES_VERSION, work, timed, fresh=True, folder=theirs.parent)
    if "search" in figures:
        texts = [m.content for m in work.messages()]
        bench_search(venv if live else None, live, work, ours, texts, args.rounds)
        del texts
    if venv and h and live and args.publish:
        publish_hermes(HermesCache(HERMES_VERSION, work, timed), theirs, h)


def run_size(venv: Path | None, n: int, args: argparse.Namespace) -> None:
    """Every figure at ``n`` messages."""
    figures = set(args.figures)
    work = Workload(n, args.seed)
    timed = min(args.timed, n // 5)
    folder = out_dir() / f"vs_{n}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    ours = folder / "ours.db"
    h: dict[str, Any] | None = None
    cache: HermesCache | None = None
    if venv:
        cache = HermesCache(HERMES_VERSION, work, timed, fresh=args.hermes_fresh)
        if not args.hermes_cached_only:
            h = hermes_build(venv, cache, work, timed)
    floors: dict[str, tuple[float, float]] = {}
    if args.log_build:
        log(f"{n:,} messages: generating the workload once, then the engine log only")
        work.cache()
        mine = build_engine_log(ours, work)
        log(f"  engine log: {mine['bulk_s']:.1f}s; batched floor")
        floors["batched"] = floor_batched(folder / "floor_batched.db", work)
        log(f"  floor: {floors['batched'][0]:.1f}s; rebuild (builds the projections)")
        bench_rebuild(ours, work, floors["batched"])
        figures -= {"append", "import", "rebuild"}
    else:
        log(f"{n:,} messages: engine build ({timed:,} timed appends)")
        mine = build_engine(ours, work, timed)
        log(f"  engine: bulk {mine['bulk_s']:.1f}s, appends {mine['append_s']:.1f}s; floors")
        floors["append"] = floor_append(folder / "floor_append.db", work, timed)
        floors["batched"] = floor_batched(folder / "floor_batched.db", work)
        floors["batched_plain"] = floor_batched(folder / "floor_plain.db", work, fts=False)
    if venv and cache and h is None:  # --hermes-cached-only: wait for another run to fill it
        if _wait_for(lambda: cache.build() is not None, args.hermes_wait, cache.folder):
            h = hermes_build(venv, cache, work, timed)
        else:
            log(f"{n:,} messages: no cached Hermes side ({cache.folder}); this project only")
            cache = None
    theirs = cache.db if cache else folder / "hermes" / "state.db"
    if cache is None:
        venv = None
    if "append" in figures:
        emit_append(mine, h, floors["append"], timed, n)
    if "bytes" in figures:
        emit_bytes(ours, h, folder / "floor_batched.db", work)
    if "search" in figures:
        texts = [m.content for m in work.messages()]
        bench_search(venv, cache, work, ours, texts, args.rounds)
        del texts
    if "import" in figures and n <= args.import_max:
        bench_import(ours, theirs if h else None, work, floors)
    if "rebuild" in figures:
        bench_rebuild(ours, work, floors["batched"])
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Run every size, then the list cold start."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 messages, 10,000 sessions")
    parser.add_argument("--sizes", default="10000,100000,1000000", help="message counts")
    parser.add_argument("--sessions", type=int, default=100_000, help="sessions for list")
    parser.add_argument("--timed", type=int, default=3000, help="appends timed one by one")
    parser.add_argument("--rounds", type=int, default=3, help="passes over each query class")
    parser.add_argument("--runs", type=int, default=9, help="cold starts to take the median of")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--import-max", type=int, default=100_000, help="largest import size")
    parser.add_argument("--figures", default=",".join(FIGURES))
    parser.add_argument(
        "--no-hermes", action="store_true", help="this project only (for sizes Hermes cannot reach)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the stores under bench/out")
    parser.add_argument(
        "--log-build",
        action="store_true",
        help="write only the log (big batches), then rebuild: sizes like 5,000,000 (no append)",
    )
    parser.add_argument(
        "--hermes-fresh",
        action="store_true",
        help="measure the Hermes side again instead of reading bench/out/hermes-cache",
    )
    parser.add_argument(
        "--hermes-cached-only",
        action="store_true",
        help="take the Hermes side only from bench/out/hermes-cache; sizes without it run alone",
    )
    parser.add_argument(
        "--hermes-wait",
        type=float,
        default=0.0,
        help="with --hermes-cached-only: seconds to wait for another run to fill the cache;"
        " with --store-dir: for another run to finish the kept bulk stores",
    )
    parser.add_argument(
        "--hermes-only",
        action="store_true",
        help="only fill the Hermes cache (build, bytes, search) for --sizes",
    )
    parser.add_argument(
        "--store-dir",
        help="keep both projects' bulk stores here and reuse them (built or continued when"
        " missing); each run times the appends on copies, then bytes and search, both live",
    )
    parser.add_argument(
        "--build-only",
        action="store_true",
        help="with --store-dir: only build the missing bulk stores, measure nothing else",
    )
    parser.add_argument(
        "--publish",
        action="store_true",
        help="with --store-dir: put the finished Hermes build into bench/out/hermes-cache",
    )
    args = parser.parse_args(argv)
    args.figures = [f.strip() for f in args.figures.split(",") if f.strip()]
    unknown = sorted(set(args.figures) - set(FIGURES))
    if unknown:
        parser.error(f"unknown figure(s) {', '.join(unknown)}; have {', '.join(FIGURES)}")
    if (args.build_only or args.publish) and not args.store_dir:
        parser.error("--build-only and --publish need --store-dir")
    if args.quick:
        args.sizes, args.sessions, args.timed, args.runs, args.rounds = "10000", 10_000, 1000, 5, 2
    emit(BENCH, "machine", **machine_info())
    if args.hermes_only and args.no_hermes:
        parser.error("--hermes-only and --no-hermes exclude each other")
    venv = None if args.no_hermes else hermes_venv()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.hermes_only:
        assert venv is not None
        for n in sizes:
            if args.store_dir:
                work = Workload(n, args.seed)
                root = Path(args.store_dir) / f"vs_{n}"
                hermes_bulk(venv, root, work, min(args.timed, n // 5))
            else:
                run_hermes_only(venv, n, args)
        if "list" in args.figures:
            hermes_list(venv, args.sessions, args.runs, fresh=args.hermes_fresh)
        return 0
    with one_cpu() as core:  # every side of every figure on the same core
        emit(BENCH, "cpu", value=core, unit="cpu every figure ran on (None: not pinned)")
        for n in sizes:
            if args.store_dir:
                run_kept(venv, n, args)
            else:
                run_size(venv, n, args)
        if "list" in args.figures and venv:
            bench_list(venv, args.sessions, args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
