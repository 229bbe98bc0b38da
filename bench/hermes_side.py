"""The Hermes Agent side of ``bench_vs_hermes``: runs inside ``bench/out/hermes-venv``.

``python bench/hermes_side.py '{"op": ..., ...}'`` prints one JSON object. Operations:

* ``build``: store the workload's first ``n - timed`` messages through ``SessionDB``'s own row
  insert (``_insert_message_rows``, many sessions per write transaction, its FTS triggers
  firing), then append the last ``timed`` messages one call each with
  ``SessionDB.append_message`` (timed; session rows created untimed).
* ``bulk`` / ``append``: the same two parts in separate processes (a bulk-only store can be
  kept and copied for repeated append runs); ``bulk`` with ``resume`` continues an
  interrupted bulk build after checking what it holds against the workload.
* ``search_serve``: time ``SessionDB.search_messages(q, limit=20)`` (wall and this thread's
  CPU time), one pass over the queries of a stdin request at a time, so the caller times its
  own passes in between; at the end, the row ids the recall queries find with
  ``limit=1000``.
* ``sessions``: ``n`` sessions of two messages each (for the ``sessions list`` cold start).

Only the standard library, ``bench.common``/``bench.hermes_workload`` and Hermes are imported.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.hermes_workload import PER_SESSION, Msg, Workload


def _open(db_path: Path) -> Any:
    os.environ["HERMES_HOME"] = str(db_path.parent)
    from hermes_state import SessionDB

    return SessionDB(db_path=db_path)


def _row(m: Msg) -> dict[str, Any]:
    row: dict[str, Any] = {"role": m.role, "content": m.content, "timestamp": m.at}
    if m.tool_calls:
        row["tool_calls"] = m.tool_calls
    if m.tool_call_id:
        row["tool_call_id"] = m.tool_call_id
        row["tool_name"] = m.tool_name
    return row


def _insert_sessions(conn: Any, work: Workload, group: dict[int, list[Msg]], db: Any) -> None:
    for k, msgs in group.items():
        conn.execute(
            "INSERT INTO sessions (id, source, model, started_at) VALUES (?, ?, ?, ?)",
            (work.session_id(k), work.source(k), "bench-model", work.start_at + k * 600.0),
        )
        inserted, calls = db._insert_message_rows(conn, work.session_id(k), [_row(m) for m in msgs])
        conn.execute(
            "UPDATE sessions SET message_count = ?, tool_call_count = ? WHERE id = ?",
            (inserted, calls, work.session_id(k)),
        )


GROUP = 100
"""Sessions per bulk write transaction."""


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _stored(conn: Any, i: int) -> tuple[Any, ...]:
    """Row ``id = i + 1`` as the columns the workload sets."""
    row = conn.execute(
        "SELECT session_id, role, content, tool_calls, tool_call_id, tool_name, timestamp"
        " FROM messages WHERE id = ?",
        (i + 1,),
    ).fetchone()
    return tuple(row) if row is not None else ()


def _expected(work: Workload, m: Msg) -> tuple[Any, ...]:
    calls = json.dumps(m.tool_calls) if m.tool_calls else None
    return (work.session_id(m.session), m.role, m.content, calls, m.tool_call_id, m.tool_name,
            m.at)  # fmt: skip


def committed(db: Any, work: Workload, bulk_n: int) -> int:
    """How many bulk messages the store already holds (0 for a new one), after checking that
    they are exactly the workload's first ones, written as whole bulk transactions."""
    conn = db._conn
    count, top = conn.execute("SELECT COUNT(*), COALESCE(MAX(id), 0) FROM messages").fetchone()
    sessions, short = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(message_count != ?), 0) FROM sessions", (PER_SESSION,)
    ).fetchone()
    fts = [conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in db._FTS_TABLES]
    problems = []
    if count != top:
        problems.append(f"{count:,} messages but the largest id is {top:,}")
    if (count % (GROUP * PER_SESSION) and count != bulk_n) or count > bulk_n:
        problems.append(f"{count:,} messages is not a whole number of bulk transactions")
    if sessions * PER_SESSION != count or short:
        problems.append(f"{sessions:,} sessions ({short} not of {PER_SESSION}) for {count:,}")
    if any(f != count for f in fts):
        problems.append(f"full-text tables hold {fts} rows for {count:,} messages")
    if problems:
        raise SystemExit(f"{db.db_path}: cannot resume: " + "; ".join(problems))
    return int(count)


def bulk(args: dict[str, Any]) -> dict[str, Any]:
    """The first ``n - timed`` messages through Hermes' row insert, ``GROUP`` sessions a write
    transaction. With ``resume``, a store that already holds a prefix of them (an interrupted
    build) is checked (counts, every ``sample``-th row and the last one against the workload)
    and continued from there, with Hermes' write counter (which times its WAL checkpoints and
    FTS ``optimize``) where the uninterrupted build would have it."""
    db_path = Path(args["db"])
    work = Workload(args["n"], args["seed"])
    bulk_n = work.n - args["timed"]
    db = _open(db_path)
    done = committed(db, work, bulk_n)
    if done and not args.get("resume"):
        raise SystemExit(f"{db_path} already holds {done:,} messages (resume not asked)")
    db._write_count = done // (GROUP * PER_SESSION)
    sample = int(args.get("sample", 997))
    checked = 0
    if done:
        _log(f"hermes bulk: resuming after {done:,} committed messages; checking")
    group: dict[int, list[Msg]] = {}
    started = time.perf_counter()
    for i, m in enumerate(work.messages()):
        if i >= bulk_n:
            break
        if i < done:
            if i % sample == 0 or i == done - 1:
                if _stored(db._conn, i) != _expected(work, m):
                    raise SystemExit(f"{db_path}: message {i + 1} differs from the workload")
                checked += 1
            continue
        group.setdefault(m.session, []).append(m)
        if i == bulk_n - 1 or (len(group) >= GROUP and (i + 1) % PER_SESSION == 0):
            batch = group
            group = {}
            db._execute_write(lambda conn, b=batch: _insert_sessions(conn, work, b, db))
            if (i + 1) % 50_000 == 0:
                _log(f"hermes bulk: {i + 1:,}/{bulk_n:,} ({time.perf_counter() - started:.0f}s)")
    bulk_s = time.perf_counter() - started
    writes = db._write_count
    db.close()
    return {"bulk_s": bulk_s, "resumed_from": done, "checked": checked, "writes": writes,
            "messages": bulk_n}  # fmt: skip


def append(args: dict[str, Any]) -> dict[str, Any]:
    """The last ``timed`` messages one ``SessionDB.append_message`` call each (timed; session
    rows created untimed) on a store holding the bulk part; Hermes' write counter continues
    from ``writes`` (the bulk's transactions). ``tail_file``: those messages as a JSON list
    (the caller has the workload generated already)."""
    db = _open(Path(args["db"]))
    work = Workload(args["n"], args["seed"])
    bulk_n = work.n - args["timed"]
    db._write_count = int(args.get("writes", 0))
    if args.get("tail_file"):  # the same messages, written by the caller (saves generating all)
        tail = [Msg(**m) for m in json.loads(Path(args["tail_file"]).read_text())]
    else:
        tail = [m for i, m in enumerate(work.messages()) if i >= bulk_n]
    result = _append_tail(db, work, tail)
    db.close()
    return result


def _append_tail(db: Any, work: Workload, tail: list[Msg]) -> dict[str, Any]:
    seen: set[int] = set()
    append_s = append_cpu = 0.0
    calls: list[float] = []
    clock, cpu = time.perf_counter, time.thread_time
    for m in tail:
        sid = work.session_id(m.session)
        if m.session not in seen:
            seen.add(m.session)
            if db.get_session(sid) is None:
                db.create_session(sid, work.source(m.session), model="bench-model")
        t0, c0 = clock(), cpu()
        db.append_message(
            sid,
            m.role,
            content=m.content,
            tool_calls=m.tool_calls or None,
            tool_call_id=m.tool_call_id,
            tool_name=m.tool_name,
            timestamp=m.at,
        )
        calls.append(clock() - t0)
        append_s += calls[-1]
        append_cpu += cpu() - c0
    calls.sort()
    return {"append_s": append_s, "append_cpu": append_cpu, "appended": len(tail),
            "median_s": calls[len(calls) // 2] if calls else 0.0,
            "slowest_s": calls[-5:][::-1]}  # fmt: skip


def build(args: dict[str, Any]) -> dict[str, Any]:
    """Bulk part through Hermes' row insert, then the timed one-call-per-message appends."""
    db_path = Path(args["db"])
    work = Workload(args["n"], args["seed"])
    timed = args["timed"]
    db = _open(db_path)
    bulk_n = work.n - timed
    group: dict[int, list[Msg]] = {}
    started = time.perf_counter()
    tail: list[Msg] = []
    for i, m in enumerate(work.messages()):
        if i >= bulk_n:
            tail.append(m)
            continue
        group.setdefault(m.session, []).append(m)
        if i == bulk_n - 1 or (len(group) >= GROUP and (i + 1) % PER_SESSION == 0):
            batch = group
            group = {}
            db._execute_write(lambda conn, b=batch: _insert_sessions(conn, work, b, db))
    bulk_s = time.perf_counter() - started
    result = _append_tail(db, work, tail)
    db.close()
    return {"bulk_s": bulk_s, **result}


def _pass(db: Any, queries: list[str]) -> dict[str, list[float]]:
    wall: list[float] = []
    cpu: list[float] = []
    for q in queries:
        t0, c0 = time.perf_counter(), time.thread_time()
        db.search_messages(q, limit=20)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return {"wall": wall, "cpu": cpu}


def search_serve(args: dict[str, Any]) -> dict[str, Any]:
    """Search latencies (limit 20), one pass at a time as the caller asks, so that it can
    run its own passes in between (the two sides then share whatever load comes and goes).
    Each stdin line is a request: ``{"warm": [...]}`` (one untimed pass), ``{"time": [...]}``
    (one timed pass: ``{"wall", "cpu"}`` on stdout) or ``{"recall": [...]}``, the last one:
    the recall hits and what the sanitizer made of every query asked, the operation's
    result."""
    db = _open(Path(args["db"]))
    asked: dict[str, None] = {}
    print(json.dumps({"ready": True}), flush=True)
    result: dict[str, Any] = {}
    for line in sys.stdin:
        request = json.loads(line)
        if "recall" in request:
            found = {q: [int(r["id"]) for r in db.search_messages(q, limit=1000)]
                     for q in request["recall"]}  # fmt: skip
            sanitize = getattr(db, "_sanitize_fts5_query", None)
            sanitized = {q: str(sanitize(q)) for q in asked} if sanitize else {}
            result = {"found": found, "sanitized": sanitized}
            break
        queries = request.get("warm") or request["time"]
        asked.update(dict.fromkeys(queries))
        timed = _pass(db, queries)
        print(json.dumps(timed if "time" in request else {}), flush=True)
    db.close()
    return result


def sessions(args: dict[str, Any]) -> dict[str, Any]:
    """``n`` sessions of two messages, written many per transaction through Hermes' row insert."""
    db_path = Path(args["db"])
    db = _open(db_path)
    n = args["n"]
    started = time.perf_counter()
    per_txn = 500

    def write(conn: Any, first: int) -> None:
        for k in range(first, min(first + per_txn, n)):
            sid = f"list_{k:08d}"
            conn.execute(
                "INSERT INTO sessions (id, source, model, started_at, title)"
                " VALUES (?, ?, ?, ?, ?)",
                (sid, "cli", "bench-model", 1_700_000_000.0 + k * 60.0, f"bench session {k}"),
            )
            db._insert_message_rows(
                conn,
                sid,
                [
                    {"role": "user", "content": f"question {k}"},
                    {"role": "assistant", "content": f"answer {k}"},
                ],
            )

    for first in range(0, n, per_txn):
        db._execute_write(lambda conn, f=first: write(conn, f))
    db.close()
    return {"build_s": time.perf_counter() - started}


def main() -> int:
    """Run the operation named in the JSON argument."""
    args = json.loads(sys.argv[1])
    ops = {
        "build": build,
        "bulk": bulk,
        "append": append,
        "search_serve": search_serve,
        "sessions": sessions,
    }
    op = ops[args["op"]]
    print(json.dumps(op(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
