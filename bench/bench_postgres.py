"""Benchmark the PostgreSQL backend: append, search per query class, rebuild, ``sessions list``.

Each figure has its floor measured in the same run, and the SQLite figure beside it:

* append: one message per transaction through ``SessionEngine.append_message``; floor: a raw
  psycopg insert of the same rows (the event, message, tsvector, session head and tracking
  rows each append writes, read back, into copies of the same tables with the same indexes),
  one transaction each; beside it the earlier narrower floor (an event row and a message row
  into tables with only their keys). Client CPU (this process) and server CPU (the cluster's
  processes, from ``/proc``) per append for all three.
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
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


def _server_cpu(data_dir: Path | None) -> float:
    """CPU seconds (user + system) used so far by the cluster's processes (the postmaster and
    its children: backends, WAL writer, checkpointer, autovacuum), from ``/proc``; 0 when the
    bench did not start the cluster."""
    if data_dir is None:
        return 0.0
    try:
        postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == postmaster or int(fields[1]) == postmaster:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


class _Meter:
    """Wall time, client CPU (this process) and server CPU summed over several blocks."""

    def __init__(self, data_dir: Path | None) -> None:
        self.data_dir = data_dir
        self.wall = self.client = self.server = 0.0
        self.count = 0

    @contextmanager
    def measure(self, count: int) -> Iterator[None]:
        wall, client, server = time.perf_counter(), time.process_time(), _server_cpu(self.data_dir)
        yield
        self.wall += time.perf_counter() - wall
        self.client += time.process_time() - client
        self.server += _server_cpu(self.data_dir) - server
        self.count += count

    def rate(self) -> float:
        return self.count / self.wall if self.wall else math.nan

    def per_op_ms(self) -> dict[str, float]:
        n = max(self.count, 1)
        return {
            "client_cpu_ms": round(1000 * self.client / n, 3),
            "server_cpu_ms": round(1000 * self.server / n, 3) if self.data_dir else math.nan,
        }


APPEND_TABLES = ("events", "messages", "messages_fts", "sessions", "tracking")
"""The tables one message append writes a row of (the floor writes copies of them)."""


def _same_rows(conn: Any, sid: str, first_version: int) -> list[dict[str, Any]]:
    """What each engine append of the run wrote, read back: its event row (stored bytes), its
    message row (every column), its index row (tsvector text) and its session's new column
    values, in append order."""
    events = conn.execute(
        "SELECT originator_id, originator_version, topic, state FROM events"
        " WHERE originator_id = %s AND originator_version >= %s ORDER BY originator_version",
        (sid, first_version),
    ).fetchall()
    messages = conn.execute(
        "SELECT m.*, f.tsv::text AS tsv FROM messages m JOIN messages_fts f ON f.id = m.id"
        " WHERE m.session_id = %s AND m.version >= %s ORDER BY m.seq",
        (sid, first_version),
    ).fetchall()
    head = conn.execute("SELECT head FROM sessions WHERE id = %s", (sid,)).fetchone()["head"]
    return [{"event": e, "message": m, "head": head} for e, m in zip(events, messages, strict=True)]


def bench_append(url: str, tmp: Path, n: int, data_dir: Path | None, rounds: int = 4) -> None:
    """One message per transaction: the engine on PostgreSQL against two raw psycopg floors
    (one transaction each, interleaved with the engine in ``rounds`` chunks so the load of
    the shared machine falls on all three alike), and the engine on SQLite.

    * ``floor`` (the issue's): the same rows the engine's append writes — its event row (the
      stored bytes), its message row (every column), its tsvector row, its session's head
      row rewritten, its tracking row — inserted by plain statements into copies of the same
      tables with the same indexes (``LIKE … INCLUDING ALL``). No decide step, no encoding,
      no tokenizing, no lock, no NOTIFY.
    * ``floor_event_message`` (the earlier, narrower one): an event row and a message row
      (id, session, seq, text) into tables with only their keys.
    """
    import psycopg
    from psycopg.rows import dict_row

    from hermes_es.commands.engine import SessionEngine

    text = "a typical chat message of about three hundred bytes " * 6
    chunk = max(n // rounds, 1)
    engine, floor, narrow = _Meter(data_dir), _Meter(data_dir), _Meter(data_dir)
    with (
        SessionEngine.open(url, actor="bench") as eng,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        sid = eng.start_session("cli", cwd="")
        for i in range(20):
            eng.append_message(sid, "user", f"warm up {i} {text}")
        for table in APPEND_TABLES:
            conn.execute(f"CREATE TABLE floor_{table} (LIKE {table} INCLUDING ALL)")
        conn.execute("INSERT INTO floor_sessions SELECT * FROM sessions WHERE id = %s", (sid,))
        conn.execute(
            "CREATE TABLE narrow_events (id BIGSERIAL PRIMARY KEY, originator_id TEXT,"
            " originator_version BIGINT, topic TEXT, state BYTEA,"
            " UNIQUE (originator_id, originator_version))"
        )
        conn.execute(
            "CREATE TABLE narrow_messages (id BIGINT PRIMARY KEY, session_id TEXT, seq BIGINT,"
            " content TEXT)"
        )
        payload = text.encode() + b"x" * 64
        done = 0
        for _ in range(rounds):
            version = (
                int(
                    conn.execute("SELECT version FROM sessions WHERE id = %s", (sid,)).fetchone()[0]
                )
                + 1
            )
            with engine.measure(chunk):
                for i in range(done, done + chunk):
                    eng.append_message(sid, "user", f"{i} {text}")
            with conn.cursor(row_factory=dict_row) as cur:
                rows = _same_rows(cur, sid, version)
            columns = [c for c in rows[0]["message"] if c != "tsv"]
            insert_message = (
                f"INSERT INTO floor_messages ({', '.join(columns)})"
                f" VALUES ({', '.join(['%s'] * len(columns))})"
            )
            with floor.measure(len(rows)):
                for row in rows:
                    m, e = row["message"], row["event"]
                    with conn.transaction():
                        conn.execute(
                            "INSERT INTO floor_events (originator_id, originator_version,"
                            " topic, state) VALUES (%s, %s, %s, %s)",
                            (e["originator_id"], e["originator_version"], e["topic"], e["state"]),
                        )
                        conn.execute(insert_message, [m[c] for c in columns])
                        conn.execute(
                            "INSERT INTO floor_messages_fts (id, tsv) VALUES (%s, %s::tsvector)",
                            (m["id"], m["tsv"]),
                        )
                        conn.execute(
                            "UPDATE floor_sessions SET last_active = %s, message_count = %s,"
                            " active_count = %s, version = %s, display_version = %s, head = %s"
                            " WHERE id = %s",
                            (m["at"], m["seq"], m["seq"], m["version"], m["version"],
                             row["head"], sid),
                        )  # fmt: skip
                        conn.execute(
                            "INSERT INTO floor_tracking (application_name, notification_id)"
                            " VALUES ('projections', %s) ON CONFLICT (application_name)"
                            " DO UPDATE SET notification_id = excluded.notification_id",
                            (m["id"] // 4096,),
                        )
            with narrow.measure(chunk):
                for i in range(done, done + chunk):
                    with conn.transaction():
                        conn.execute(
                            "INSERT INTO narrow_events (originator_id, originator_version,"
                            " topic, state) VALUES (%s, %s, %s, %s)",
                            ("s", i + 1, "hermes.message.appended", payload),
                        )
                        conn.execute(
                            "INSERT INTO narrow_messages VALUES (%s, %s, %s, %s)", (i, "s", i, text)
                        )
            done += chunk
        conn.execute(
            "DROP TABLE narrow_events, narrow_messages, "
            + ", ".join(f"floor_{t}" for t in APPEND_TABLES)
        )
    with SessionEngine.open(tmp / "append.db", actor="bench") as eng:
        sid = eng.start_session("cli", cwd="")
        start = time.perf_counter()
        for i in range(done):
            eng.append_message(sid, "user", f"{i} {text}")
        lite = done / (time.perf_counter() - start)
    pg = engine.rate()
    mine, base, thin = engine.per_op_ms(), floor.per_op_ms(), narrow.per_op_ms()
    emit(
        BENCH,
        "append_one_per_txn",
        value=round(pg, 1),
        unit="msgs/s",
        floor=round(floor.rate(), 1),
        ratio=ratio(pg, floor.rate()),
        target=0.5,
        ok=pg >= 0.5 * floor.rate(),
        floor_event_message=round(narrow.rate(), 1),
        ratio_event_message=ratio(pg, narrow.rate()),
        **mine,
        floor_client_cpu_ms=base["client_cpu_ms"],
        floor_server_cpu_ms=base["server_cpu_ms"],
        event_message_client_cpu_ms=thin["client_cpu_ms"],
        event_message_server_cpu_ms=thin["server_cpu_ms"],
        cpu_ratio=ratio(
            base["client_cpu_ms"] + base["server_cpu_ms"],
            mine["client_cpu_ms"] + mine["server_cpu_ms"],
        ),
        sqlite=round(lite, 1),
        messages=done,
    )


def build_search_store(
    url: str, messages: int, *, batched_url: str | None, sqlite: Path | None = None
) -> tuple[Path, TextGen]:
    """The bench_sessions search store on SQLite, copied to ``url`` with ``copy-store --bulk``
    (reused when ``url`` already holds exactly that log); with ``batched_url``, also copied
    there batch by batch (the resumable path) for its rate. ``sqlite``: that SQLite store (of
    ``messages`` messages, built earlier by this bench) instead of ``bench/out``'s."""
    import psycopg

    from hermes_es.commands.copy_store import copy_store
    from hermes_es.store.backend import open_backend

    if sqlite is not None:
        if not sqlite.exists():
            raise SystemExit(f"bench_postgres: --sqlite {sqlite}: no such file")
        path, gen = sqlite, TextGen(seed=7)  # the queries depend on the vocabulary only
    else:
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


class ServerCpu:
    """CPU seconds used so far by every process of a local server (its postmaster's children,
    read from ``/proc``); ``None`` when the server is not local or ``/proc`` is unreadable."""

    def __init__(self, conn: Any) -> None:
        self.postmaster: int | None = None
        try:
            backend = int(conn.execute_pg("SELECT pg_backend_pid()").fetchall()[0][0])
            self.postmaster = int(self._stat(backend)[1])
        except (OSError, ValueError, IndexError):
            self.postmaster = None
        self.tick = os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _stat(pid: int) -> list[str]:
        text = Path(f"/proc/{pid}/stat").read_text()
        return text[text.rindex(")") + 2 :].split()  # state, ppid, …

    def seconds(self) -> float | None:
        """utime + stime of the postmaster's children, in seconds."""
        if self.postmaster is None:
            return None
        ticks = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = self._stat(int(entry.name))
            except (OSError, ValueError):
                continue
            if int(fields[1]) == self.postmaster:
                ticks += int(fields[11]) + int(fields[12])
        return ticks / self.tick


def interleaved(
    variants: dict[str, Callable[[str], object]],
    queries: Sequence[str],
    rounds: int,
    server: ServerCpu,
) -> dict[str, dict[str, float]]:
    """Each query through every variant in turn (so the machine's load swings hit them alike):
    wall p50/p99 per variant, and client + server CPU ms per query (summed over the run)."""
    walls: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, float] = dict.fromkeys(variants, 0.0)
    known = server.seconds() is not None
    for _ in range(rounds):
        for q in queries:
            for name, fn in variants.items():
                before = server.seconds() if known else 0.0
                client = time.process_time()
                start = time.perf_counter()
                fn(q)
                walls[name].append(time.perf_counter() - start)
                client = time.process_time() - client  # before reading /proc again
                after = server.seconds() if known else 0.0
                cpu[name] += client + ((after or 0.0) - (before or 0.0))
    calls = max(rounds * len(queries), 1)
    out = {}
    for name in variants:
        out[name] = latency_summary(walls[name])
        out[name]["cpu_ms"] = round(1000 * cpu[name] / calls, 2) if known else math.nan
    return out


def bench_search(
    url: str, path: Path, gen: TextGen, messages: int, rounds: int, *, sqlite: bool = True
) -> None:
    """Search p50/p99 per class on PostgreSQL, its bare tsquery floor, and SQLite beside; the
    window alone (``window``: ``newest_matches``, the default) beside the window of session 5's
    default (``candidates``: slices for pairs and prefixes, else one statement) and the one
    statement of every match. The PostgreSQL variants run interleaved, query by query, each
    with its client + server CPU."""
    from hermes_es.commands.engine import SessionEngine
    from hermes_es.projections.catalog import connect
    from hermes_es.queries.search import search_messages
    from hermes_es.store.postgres.search import (
        CANDIDATE_WINDOW,
        Query,
        candidates,
        newest_matches,
    )

    lite_conn = connect(path) if sqlite else None
    with SessionEngine.open(url, actor="bench") as eng:
        conn = eng.store.connection()
        server = ServerCpu(conn)

        def floor(q: str) -> object:
            query = Query.of(q)
            if query is None:
                return []
            return conn.execute_pg(
                "SELECT id FROM messages_fts WHERE tsv @@ %s::tsquery LIMIT 20",
                (query.match,),
                prepare=False,
            ).fetchall()

        def ranges(q: str) -> object:
            query = Query.of(q)
            return newest_matches(conn, query, None, CANDIDATE_WINDOW) if query else []

        def session5(q: str) -> object:
            query = Query.of(q)
            return candidates(conn, query, None, CANDIDATE_WINDOW, sliced=None) if query else []

        def one_statement(q: str) -> object:
            query = Query.of(q)
            return candidates(conn, query, None, CANDIDATE_WINDOW, sliced=False) if query else []

        variants: dict[str, Callable[[str], object]] = {
            "floor": floor,
            "search": lambda q: search_messages(conn, q, limit=20),
            "window": ranges,
            "session5_window": session5,
            "one_statement": one_statement,
        }
        for name, queries in query_classes(gen).items():
            for q in queries:  # warm
                search_messages(conn, q)
            got = interleaved(variants, queries, rounds, server)
            lite = (
                latency_summary(
                    time_queries(lambda q: search_messages(lite_conn, q, limit=20), queries, rounds)
                )
                if lite_conn is not None
                else {"p50_ms": math.nan, "p99_ms": math.nan}
            )
            mine, base = got["search"], got["floor"]
            extra = {
                f"{variant}_{key}": got[variant][key]
                for variant in ("window", "session5_window", "one_statement")
                for key in ("p50_ms", "p99_ms", "cpu_ms")
            }
            emit(
                BENCH,
                f"search_{name}",
                value=mine["p99_ms"],
                unit="ms p99",
                p50_ms=mine["p50_ms"],
                cpu_ms=mine["cpu_ms"],
                floor=base["p99_ms"],
                floor_p50_ms=base["p50_ms"],
                floor_cpu_ms=base["cpu_ms"],
                ratio=ratio(mine["p99_ms"], base["p99_ms"]),
                target_ms=50,
                ok=mine["p99_ms"] <= 50,
                sqlite_p50_ms=lite["p50_ms"],
                sqlite_p99_ms=lite["p99_ms"],
                **extra,
                queries=len(queries),
                messages=messages,
                loadavg=[round(x, 2) for x in os.getloadavg()],
            )
    if lite_conn is not None:
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


class KeptCluster:
    """A cluster kept on disk between runs (``--pgdata``): started with its own settings
    (``postgresql.conf``) as the ``postgres`` user when run as root, stopped at the end."""

    def __init__(self, data: Path) -> None:
        if not (data / "PG_VERSION").exists():
            raise SystemExit(f"bench_postgres: --pgdata {data}: not a PostgreSQL data directory")
        self.data = data

    def _pg_ctl(self, *args: str) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.pg_server import _find

        cmd = [_find("pg_ctl"), "-D", str(self.data), *args]
        if os.geteuid() == 0:
            cmd = ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(f"'{a}'" for a in cmd)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=300)

    def start(self) -> None:
        """Start the cluster (waits until it accepts connections)."""
        log(f"starting the kept cluster in {self.data}")
        self._pg_ctl("-l", str(self.data.parent / "server.log"), "-w", "-t", "120", "start")

    def stop(self) -> None:
        """Stop it (fast shutdown)."""
        self._pg_ctl("-m", "fast", "-w", "stop")


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
    parser.add_argument(
        "--sqlite",
        type=Path,
        default=None,
        help="the SQLite search store of --messages messages to use (default: bench/out's)",
    )
    parser.add_argument(
        "--pgdata",
        type=Path,
        default=None,
        help="a cluster's data directory (with --url): start it, run, stop it again",
    )
    parser.add_argument(
        "--no-sqlite-search", action="store_true", help="leave out the SQLite search figures"
    )
    args = parser.parse_args(argv)
    if args.pgdata is not None and not args.url:
        parser.error("--pgdata needs --url (the database in that cluster)")
    if args.quick:
        args.messages, args.appends, args.rounds, args.runs = 10_000, 1_000, 2, 5
    emit(BENCH, "machine", **machine_info())
    server = None
    kept = KeptCluster(args.pgdata) if args.pgdata is not None else None
    if kept is not None:
        kept.start()
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
            path, gen = build_search_store(
                search_url, args.messages, batched_url=batched, sqlite=args.sqlite
            )
            bench_search(
                search_url, path, gen, args.messages, args.rounds, sqlite=not args.no_sqlite_search
            )
            if args.only is None:
                bench_rebuild(search_url, path, args.messages)
                bench_list(search_url, path, args.runs)
        if args.only != "search":
            bench_append(
                server.database() if server else url,
                tmp,
                args.appends,
                server.data if server else kept.data if kept else None,
            )
    finally:
        if server is not None:
            server.stop()
        if kept is not None:
            kept.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
