"""Benchmark ``hermes sessions``: list cold start, search per query class, prune, optimize.

* list: wall time of a real ``hermes sessions list`` subprocess on a store with ``--sessions``
  sessions, beside the floor ``python -c "import apsw, click"`` (median of ``--runs``).
* search: p50/p99 per query class (word incl. the most frequent ones, two words, phrase,
  prefix, identifier, CJK) over ``--messages`` messages, for the bounded-window plan and for
  plain ``ORDER BY rank`` in the same run; the floor is a bare ``SELECT rowid … MATCH … LIMIT``.
* prune: plan + delete of ``--sessions`` old ended sessions, in seconds.
* optimize: FTS merge + VACUUM of the search store, seconds and sizes.

Stores are written through the real write path (Store transactions, aggregate decisions,
inline projections), many sessions per transaction, and cached under ``bench/out``.

Run: ``python -m bench.bench_sessions`` (quick: 100,000 messages) or ``--full`` (1,000,000).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import (
    TextGen,
    emit,
    latency_summary,
    log,
    machine_info,
    out_dir,
    ratio,
    time_queries,
)

BENCH = "sessions"
DAY = 86400.0


def _draft(role: str, text: str):  # type: ignore[no-untyped-def]
    from hermes_es import events as ev

    return ev.Message(seq=-1, uid="", role=role, content=text)


def build_store(
    path: Path,
    sessions: int,
    per_session: int,
    *,
    ended: bool,
    start_at: float,
    gen: TextGen | None,
    per_txn: int = 200,
) -> None:
    """Write ``sessions`` sessions of ``per_session`` messages (turns of two) to ``path``."""
    from hermes_es.aggregates import session as agg
    from hermes_es.commands.unit_of_work import Store

    if path.exists():
        return
    tmp = path.with_suffix(".building")
    for suffix in ("", "-wal", "-shm"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)
    store = Store(tmp)
    sources = ("cli", "cli", "cli", "telegram", "oneshot", "discord", "cron", "tool")
    started = time.perf_counter()
    for first in range(0, sessions, per_txn):
        with store.transaction() as batch:
            for i in range(first, min(first + per_txn, sessions)):
                at = start_at + i * 60.0
                sid = f"s{i:08d}"
                state = batch.record(
                    sid,
                    agg.start(
                        sid,
                        at=at,
                        source=sources[i % len(sources)],
                        title=f"bench session {i}" if i % 3 == 0 else "",
                        cwd=f"/home/u/code/project{i % 40}",
                        workspace_key=f"/home/u/code/project{i % 40}",
                    ),
                )
                for k in range(0, per_session, 2):
                    texts = [gen.message() if gen else f"question {i}.{k}" for _ in range(2)]
                    drafts = [_draft("user", texts[0]), _draft("assistant", texts[1])]
                    state = batch.record(
                        sid, agg.append(state, drafts[: per_session - k], at=at + k)
                    )
                if ended:
                    batch.record(sid, agg.end(state, "user_exit", at=at + per_session))
        if first and first % (per_txn * 50) == 0:
            log(f"  {first}/{sessions} sessions ({time.perf_counter() - started:.0f}s)")
    store.close()
    for suffix in ("", "-wal", "-shm"):
        src = Path(str(tmp) + suffix)
        if src.exists():
            os.replace(src, Path(str(path) + suffix))


def _median_wall(cmd: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_list(sessions: int, runs: int) -> None:
    """Cold start of ``hermes sessions list`` beside ``import apsw, click``."""
    home = out_dir() / f"list_{sessions}"
    home.mkdir(exist_ok=True)
    log(f"list store: {sessions} sessions")
    build_store(
        home / "state.db", sessions, 2, ended=False, start_at=time.time() - sessions * 60, gen=None
    )
    env = {**os.environ, "HERMES_HOME": str(home)}
    hermes = [sys.executable, "-c", "from hermes_es.cli import main; main()", "sessions", "list"]
    floor_cmd = [sys.executable, "-c", "import apsw, click"]
    _median_wall(hermes, env, 2)  # warm the page cache
    floor = _median_wall(floor_cmd, env, runs)
    value = _median_wall(hermes, env, runs)
    emit(
        BENCH,
        "list_cold_start",
        value=value * 1000,
        unit="ms",
        floor=floor * 1000,
        ratio=ratio(value, floor),
        target=2.0,
        ok=value <= 2 * floor,
        sessions=sessions,
    )


def query_classes(gen: TextGen) -> dict[str, list[str]]:
    """Queries per class: the most frequent words first, then words across frequencies."""
    top = gen.words[:5]
    spread = [gen.word_at_quantile(q) for q in (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99)]
    words = top + spread + [gen.words[200 + k * 997] for k in range(7)]
    two = [f"{a} {b}" for a, b in zip(words, reversed(words), strict=True)]
    phrases = [f'"{a} {b}"' for a, b in zip(gen.words[:10], gen.words[1:11], strict=True)] + [
        f'"{gen.word_at_quantile(q)} {gen.word_at_quantile(q / 2)}"' for q in (0.3, 0.5, 0.7, 0.9)
    ]
    prefixes = [w[:3] + "*" for w in words if len(w) >= 3] + ["t*", "s*", "co*"]
    identifiers = ["chat-send", "P2.2", "snake_case_name", "getUserById", "HTTP_404", "v1.2.3"]
    identifiers += ["state.db", "src/main.py", "tool_call_id", "gpt-4o", "ERR_CONN_RESET"]
    cjk = ["模型", "全文搜索", "中文", "検索", "再試行", "토크나이저", "세션", "历史记录"]
    return {
        "word": words,
        "two_words": two,
        "phrase": phrases,
        "prefix": prefixes,
        "identifier": identifiers,
        "cjk": cjk,
    }


def search_store(messages: int) -> tuple[Path, TextGen]:
    """The search store of ``messages`` messages (50 a session, ended, 400 days old) and the
    text generator its queries are drawn from."""
    gen = TextGen(seed=7)
    per_session = 50
    path = out_dir() / f"search_{messages}.db"
    log(f"search store: {messages} messages")
    build_store(
        path,
        messages // per_session,
        per_session,
        ended=True,
        start_at=time.time() - 400 * DAY,
        gen=gen,
        per_txn=20,
    )
    return path, gen


def bench_search(messages: int, rounds: int) -> Path:
    """Search latency per query class: bounded plan, plain bm25, and a bare MATCH floor."""
    from hermes_es.projections.catalog import connect
    from hermes_es.queries.fts_query import build_match
    from hermes_es.queries.search import search_messages

    path, gen = search_store(messages)
    conn = connect(path)
    emit(BENCH, "search_store", value=path.stat().st_size / 1e6, unit="MB", messages=messages)

    def floor(q: str) -> object:
        match = build_match(q)
        if match is None:
            return []
        return conn.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? LIMIT 20", (match,)
        ).fetchall()

    for name, queries in query_classes(gen).items():
        for q in queries:  # warm
            search_messages(conn, q)
        base = time_queries(floor, queries, rounds)
        mine = time_queries(lambda q: search_messages(conn, q, limit=20), queries, rounds)
        plain = time_queries(
            lambda q: search_messages(conn, q, limit=20, plan="full"), queries, rounds
        )
        m, p, b = latency_summary(mine), latency_summary(plain), latency_summary(base)
        emit(
            BENCH,
            f"search_{name}",
            value=m["p99_ms"],
            unit="ms p99",
            p50_ms=m["p50_ms"],
            plain_p50_ms=p["p50_ms"],
            plain_p99_ms=p["p99_ms"],
            floor=b["p99_ms"],
            ratio=ratio(m["p99_ms"], b["p99_ms"]),
            target_ms=50,
            ok=m["p99_ms"] <= 50,
            queries=len(queries),
            messages=messages,
        )
    conn.close()
    return path


def bench_prune(sessions: int) -> None:
    """Plan and delete ``sessions`` old ended sessions (the floor: a raw DELETE of the rows)."""
    from hermes_es.commands.prune import UnitFilter, execute_prune, plan_prune
    from hermes_es.commands.unit_of_work import Store
    from hermes_es.queries.units import load_units

    template = out_dir() / f"prune_{sessions}.db"
    log(f"prune store: {sessions} sessions")
    build_store(
        template, sessions, 4, ended=True, start_at=time.time() - 400 * DAY, gen=TextGen(seed=3)
    )
    work = out_dir() / "prune_work.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(work) + suffix).unlink(missing_ok=True)
    shutil.copy(template, work)
    store = Store(work)
    start = time.perf_counter()
    plan = plan_prune(load_units(store.connection()), UnitFilter(older_than=90 * DAY), time.time())
    planned = time.perf_counter()
    done = execute_prune(store, plan)
    finished = time.perf_counter()
    store.close()
    emit(
        BENCH,
        "prune",
        value=finished - start,
        unit="s",
        plan_s=planned - start,
        delete_s=finished - planned,
        sessions=len(done),
    )


def bench_optimize(path: Path) -> None:
    """FTS merge + VACUUM of the search store."""
    from hermes_es.commands.optimize import optimize_store

    start = time.perf_counter()
    result = optimize_store(path)
    emit(
        BENCH,
        "optimize",
        value=time.perf_counter() - start,
        unit="s",
        merge_s=result.merge_seconds,
        vacuum_s=result.vacuum_seconds,
        mb_before=(result.db_before + result.wal_before) / 1e6,
        mb_after=(result.db_after + result.wal_after) / 1e6,
    )


def main(argv: list[str] | None = None) -> int:
    """Run every figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--full", action="store_true", help="1,000,000 messages")
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15, help="cold starts to take the median of")
    parser.add_argument("--rounds", type=int, default=3, help="passes over each query class")
    parser.add_argument("--only", choices=("list", "search", "prune", "optimize"), default=None)
    args = parser.parse_args(argv)
    messages = args.messages or (1_000_000 if args.full else 100_000)
    emit(BENCH, "machine", **machine_info())
    if args.only in (None, "list"):
        bench_list(args.sessions, args.runs)
    if args.only in (None, "prune"):
        bench_prune(args.sessions)
    if args.only in (None, "search", "optimize"):
        path = bench_search(messages, args.rounds) if args.only != "optimize" else None
        if args.only in (None, "optimize"):
            bench_optimize(path or out_dir() / f"search_{messages}.db")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
