"""Benchmark the PostgreSQL backend: append, search per query class, rebuild, ``sessions list``.

Each figure has its floor measured in the same run, and the SQLite figure beside it:

* append: one message per transaction through ``SessionEngine.append_message``; floor: a raw
  psycopg insert of the same rows (an event row and a message row), one transaction each.
* search: p50/p99 per query class (the classes of ``bench_sessions``) over ``--messages``
  messages; floor: a bare ``SELECT id FROM messages_fts WHERE tsv @@ … LIMIT 20``.
* rebuild: ``rebuild-projections`` of the search store; floor: reading every event row once.
* list: wall time of a ``hermes --store URL sessions list`` subprocess; floor: a subprocess
  that imports psycopg, connects and runs ``SELECT 1``.

The search store is built on SQLite by ``bench_sessions.build_store`` and moved to PostgreSQL
with ``copy-store --bulk`` (one COPY, indexes built once; at quick sizes the resumable
batch-by-batch copy-store runs too); both throughputs are reported. A ``--url`` database that
already holds the same log is reused, so the 1,000,000-message store is built once. The
server is a temporary cluster started like the tests' (``tests/pg_server.py``: initdb +
pg_ctl on 127.0.0.1, a free port), unless ``--url`` names one. Note: that cluster runs with
``fsync=off`` (as in the tests), so commit figures leave out the disk flush a production
server pays.

Run: ``python -m bench.bench_postgres`` (quick: 20,000 messages) or ``--messages 1000000``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.bench_sessions import query_classes, search_store
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

BENCH = "postgres"


def bench_append(url: str, tmp: Path, n: int) -> None:
    """One message per transaction: engine on PostgreSQL, raw psycopg floor, engine on SQLite."""
    import psycopg

    from hermes_es.commands.engine import SessionEngine

    text = "a typical chat message of about three hundred bytes " * 6
    with SessionEngine.open(url, actor="bench") as eng:
        sid = eng.start_session("cli", cwd="")
        eng.append_message(sid, "user", "warm up")
        start = time.perf_counter()
        for i in range(n):
            eng.append_message(sid, "user", f"{i} {text}")
        pg = n / (time.perf_counter() - start)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE floor_events (id BIGSERIAL PRIMARY KEY, originator_id TEXT,"
            " originator_version BIGINT, topic TEXT, state BYTEA,"
            " UNIQUE (originator_id, originator_version))"
        )
        conn.execute(
            "CREATE TABLE floor_messages (id BIGINT PRIMARY KEY, session_id TEXT, seq BIGINT,"
            " content TEXT)"
        )
        payload = text.encode() + b"x" * 64
        start = time.perf_counter()
        for i in range(n):
            with conn.transaction():
                conn.execute(
                    "INSERT INTO floor_events (originator_id, originator_version, topic, state)"
                    " VALUES (%s, %s, %s, %s)",
                    ("s", i + 1, "hermes.message.appended", payload),
                )
                conn.execute(
                    "INSERT INTO floor_messages VALUES (%s, %s, %s, %s)", (i, "s", i, text)
                )
        floor = n / (time.perf_counter() - start)
        conn.execute("DROP TABLE floor_events, floor_messages")
    with SessionEngine.open(tmp / "append.db", actor="bench") as eng:
        sid = eng.start_session("cli", cwd="")
        start = time.perf_counter()
        for i in range(n):
            eng.append_message(sid, "user", f"{i} {text}")
        lite = n / (time.perf_counter() - start)
    emit(
        BENCH,
        "append_one_per_txn",
        value=round(pg, 1),
        unit="msgs/s",
        floor=round(floor, 1),
        ratio=ratio(pg, floor),
        target=0.5,
        ok=pg >= 0.5 * floor,
        sqlite=round(lite, 1),
        messages=n,
    )


def build_search_store(url: str, messages: int, *, batched_url: str | None) -> tuple[Path, TextGen]:
    """The bench_sessions search store on SQLite, copied to ``url`` with ``copy-store --bulk``
    (reused when ``url`` already holds exactly that log); with ``batched_url``, also copied
    there batch by batch (the resumable path) for its rate."""
    import psycopg

    from hermes_es.commands.copy_store import copy_store
    from hermes_es.store.backend import open_backend

    path, gen = search_store(messages)
    source = open_backend(str(path))
    with psycopg.connect(url) as conn:
        held = conn.execute("SELECT to_regclass('events') IS NOT NULL").fetchone()
        count = conn.execute("SELECT COUNT(*) FROM events").fetchone() if held and held[0] else None
    lite = source.reader()
    events = int(lite.execute("SELECT COUNT(*) FROM events").fetchall()[0][0])
    lite.close()
    if count is not None and int(count[0]) == events:
        log(f"reusing the PostgreSQL search store at {url} ({events} events)")
        return path, gen
    runs = [("copy_store_bulk_sqlite_to_pg", url, True)]
    if batched_url:
        runs.append(("copy_store_sqlite_to_pg", batched_url, False))
    for figure, target, bulk in runs:
        log(f"copy-store{' --bulk' if bulk else ''} to PostgreSQL")
        start = time.perf_counter()
        cpu = time.process_time()
        done = copy_store(source, open_backend(target), bulk=bulk)
        seconds = time.perf_counter() - start
        emit(
            BENCH,
            figure,
            value=round(done.events / seconds, 1),
            unit="events/s",
            seconds=round(seconds, 2),
            client_cpu_s=round(time.process_time() - cpu, 2),
            events=done.events,
            messages=messages,
            digests_equal=done.digest == done.target_digest,
        )
    return path, gen


def bench_search(url: str, path: Path, gen: TextGen, messages: int, rounds: int) -> None:
    """Search p50/p99 per class on PostgreSQL, its bare tsquery floor, and SQLite beside."""
    from hermes_es.commands.engine import SessionEngine
    from hermes_es.projections.catalog import connect
    from hermes_es.queries.search import search_messages
    from hermes_es.store.postgres.tokens import tsquery_text

    lite_conn = connect(path)
    with SessionEngine.open(url, actor="bench") as eng:
        conn = eng.store.connection()

        def floor(q: str) -> object:
            tsq = tsquery_text(q)
            if tsq is None:
                return []
            return conn.execute_pg(
                "SELECT id FROM messages_fts WHERE tsv @@ %s::tsquery LIMIT 20", (tsq,)
            ).fetchall()

        for name, queries in query_classes(gen).items():
            for q in queries:  # warm
                search_messages(conn, q)
            base = latency_summary(time_queries(floor, queries, rounds))
            mine = latency_summary(
                time_queries(lambda q: search_messages(conn, q, limit=20), queries, rounds)
            )
            lite = latency_summary(
                time_queries(lambda q: search_messages(lite_conn, q, limit=20), queries, rounds)
            )
            emit(
                BENCH,
                f"search_{name}",
                value=mine["p99_ms"],
                unit="ms p99",
                p50_ms=mine["p50_ms"],
                floor=base["p99_ms"],
                floor_p50_ms=base["p50_ms"],
                ratio=ratio(mine["p99_ms"], base["p99_ms"]),
                target_ms=50,
                ok=mine["p99_ms"] <= 50,
                sqlite_p50_ms=lite["p50_ms"],
                sqlite_p99_ms=lite["p99_ms"],
                queries=len(queries),
                messages=messages,
            )
    lite_conn.close()


def bench_rebuild(url: str, path: Path, messages: int) -> None:
    """rebuild-projections on PostgreSQL beside a plain read of every event, and on SQLite."""
    import psycopg

    from hermes_es.projections.rebuild import rebuild
    from hermes_es.store.backend import open_backend

    with psycopg.connect(url) as conn:
        start = time.perf_counter()
        rows = 0
        with conn.cursor(name="scan") as cur:
            cur.execute("SELECT originator_id, originator_version, topic, state FROM events")
            for _ in cur:
                rows += 1
        floor = time.perf_counter() - start
    start = time.perf_counter()
    count = open_backend(url).rebuild()
    pg = time.perf_counter() - start
    copy = out_dir() / "rebuild_copy.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(copy) + suffix).unlink(missing_ok=True)
    copy.write_bytes(path.read_bytes())
    start = time.perf_counter()
    rebuild(copy)
    lite = time.perf_counter() - start
    emit(
        BENCH,
        "rebuild",
        value=round(pg, 2),
        unit="s",
        floor=round(floor, 2),
        ratio=ratio(pg, floor),
        events=count,
        scanned=rows,
        sqlite_s=round(lite, 2),
        messages=messages,
    )


def _median_wall(cmd: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_list(url: str, path: Path, runs: int) -> None:
    """``hermes --store URL sessions list`` cold start, its connect floor, and SQLite's."""
    env = {**os.environ, "HERMES_HOME": str(out_dir())}
    hermes = [sys.executable, "-c", "from hermes_es.cli import main; main()"]
    pg_cmd = [*hermes, "--store", url, "sessions", "list"]
    lite_cmd = [*hermes, "--store", str(path), "sessions", "list"]
    floor_cmd = [
        sys.executable,
        "-c",
        f"import psycopg; psycopg.connect({url!r}).execute('SELECT 1').fetchall()",
    ]
    _median_wall(pg_cmd, env, 1)
    floor = _median_wall(floor_cmd, env, runs)
    pg = _median_wall(pg_cmd, env, runs)
    lite = _median_wall(lite_cmd, env, runs)
    emit(
        BENCH,
        "list_cold_start",
        value=round(pg * 1000, 1),
        unit="ms",
        floor=round(floor * 1000, 1),
        ratio=ratio(pg, floor),
        sqlite_ms=round(lite * 1000, 1),
    )


def main(argv: list[str] | None = None) -> int:
    """Start (or use) a server, run every figure, stop the server."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (the default sizes)")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--appends", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--url", default=None, help="an empty database to use instead")
    parser.add_argument("--only", choices=("append", "search"), default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.appends, args.rounds, args.runs = 10_000, 1_000, 2, 5
    emit(BENCH, "machine", **machine_info())
    server = None
    if args.url:
        url = args.url
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.pg_server import PgServer

        server = PgServer()
        log("starting a temporary PostgreSQL cluster")
        server.start()
        url = server.database()
    try:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        emit(BENCH, "server", version=str(version[0] if version else ""))
        tmp = out_dir() / "postgres"
        tmp.mkdir(exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(str(tmp / "append.db") + suffix).unlink(missing_ok=True)
        if args.only != "append":
            search_url = server.database() if server else url
            batched = server.database() if server and args.messages <= 20_000 else None
            path, gen = build_search_store(search_url, args.messages, batched_url=batched)
            bench_search(search_url, path, gen, args.messages, args.rounds)
            if args.only is None:
                bench_rebuild(search_url, path, args.messages)
                bench_list(search_url, path, args.runs)
        if args.only != "search":
            bench_append(server.database() if server else url, tmp, args.appends)
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
