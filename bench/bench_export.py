"""Benchmark: backup export and import rates, and the cost of a verified delete.

1. Import: ``--n`` messages (``--sessions`` sessions) restored from JSONL backups through
   ``import_backups`` (events + every projection + FTS, one transaction). Floor: a raw APSW
   ``executemany`` insert of the same rows into a plain table, one transaction.
2. Export: the same sessions written as JSONL backups by ``export_sessions``. Floor: a plain
   scan of the ``messages`` table (every column, every row).
3. Verified delete of a session with ``--big`` messages and 5 delegates, and of one with
   ``--small`` messages: the version check (delegate tree + one display-version comparison per
   stream, inside the write transaction) is timed apart from the physical delete and the WAL
   scrub, to show the check does not grow with transcript length.

Prints one JSON object per line. Run: ``python -m bench.bench_export [--n 100000]``
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import apsw

from hermes_es.commands.delete import _check_expected, delegate_tree, delete_session, scrub_wal
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.export import ExportOptions, export_sessions
from hermes_es.commands.importing import import_backups

WORDS = (
    "session", "agent", "message", "search", "index", "tool", "call", "result", "error",
    "retry", "branch", "resume", "export", "delete", "title", "workspace", "model", "token",
    "prompt", "context", "window", "compress", "summary", "refactor", "test",
)  # fmt: skip


def emit(figure: str, **fields: Any) -> None:
    """One JSON line for a figure."""
    record: dict[str, Any] = {"bench": "bench_export", "figure": figure}
    for key, value in fields.items():
        record[key] = round(value, 4) if isinstance(value, float) else value
    print(json.dumps(record), flush=True)


def log(message: str) -> None:
    """Progress on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def text(rng: random.Random, size: int = 300) -> str:
    """About ``size`` bytes of words."""
    out: list[str] = []
    n = 0
    while n < size:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def backup_line(sid: str, n: int, rng: random.Random, **extra: Any) -> str:
    """A backup object with ``n`` alternating user/assistant messages."""
    messages = [
        {
            "uid": f"{sid}-{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "content": text(rng),
            "state": "active",
            "at": 1_700_000_000.0 + i,
        }
        for i in range(n)
    ]
    obj = {"id": sid, "source": "cli", "started_at": 1_700_000_000.0, "messages": messages}
    obj.update(extra)
    return json.dumps(obj)


def write_backups(folder: Path, sessions: int, per: int, rng: random.Random) -> list[str]:
    """One backup file per session; returns the ids."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = [f"s{i:05d}" for i in range(sessions)]
    for sid in ids:
        (folder / f"{sid}.jsonl").write_text(backup_line(sid, per, rng) + "\n")
    return ids


def raw_insert_floor(path: Path, folder: Path) -> float:
    """Seconds to insert the same rows with a raw APSW executemany, one transaction."""
    rows = []
    for file in sorted(folder.glob("*.jsonl")):
        obj = json.loads(file.read_text())
        rows += [
            (obj["id"], i, m["role"], m["content"], m["at"]) for i, m in enumerate(obj["messages"])
        ]
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE m (session_id TEXT, seq INT, role TEXT, content TEXT, at REAL)")
    start = time.perf_counter()
    with conn:
        conn.executemany("INSERT INTO m VALUES (?, ?, ?, ?, ?)", rows)
    took = time.perf_counter() - start
    conn.close()
    return took


def scan_floor(conn: apsw.Connection) -> float:
    """Seconds for a plain scan of every column of every messages row."""
    start = time.perf_counter()
    rows = conn.execute("SELECT * FROM messages ORDER BY session_id, ord, seq").fetchall()
    assert rows
    return time.perf_counter() - start


def bench_rates(work: Path, n: int, sessions: int, rng: random.Random) -> None:
    """Import and export rates against their floors."""
    per = n // sessions
    folder = work / "backups"
    ids = write_backups(folder, sessions, per, rng)
    total = per * sessions
    log(f"importing {total} messages in {sessions} sessions")
    engine = SessionEngine.open(work / "rates.db")
    start = time.perf_counter()
    import_backups(engine.store, [folder], max_messages=0)
    took = time.perf_counter() - start
    floor = raw_insert_floor(work / "floor.db", folder)
    emit("import_rate", value=total / took, unit="messages/s", floor=total / floor,
         ratio=round(floor / took, 4), messages=total)  # fmt: skip
    conn = engine.store.connection()
    log("exporting")
    start = time.perf_counter()
    export_sessions(conn, work / "out", ids, ExportOptions(fmt="jsonl", max_messages=0))
    took = time.perf_counter() - start
    floor = scan_floor(conn)
    emit("export_rate", value=total / took, unit="messages/s", floor=total / floor,
         ratio=round(floor / took, 4), messages=total)  # fmt: skip
    engine.close()


def bench_delete(work: Path, size: int, rng: random.Random, repeat: int) -> None:
    """Verified delete of a ``size``-message session with 5 delegates: check vs delete times."""
    checks: list[float] = []
    deletes: list[float] = []
    scrubs: list[float] = []
    for r in range(repeat):
        folder = work / f"del-{size}-{r}"
        folder.mkdir()
        parent = f"p{size}"
        lines = [backup_line(parent, size, rng)]
        lines += [
            backup_line(f"{parent}_d{k}", 200, rng, parent_id=parent, parent_kind="delegate")
            for k in range(5)
        ]
        (folder / "all.jsonl").write_text("\n".join(lines) + "\n")
        engine = SessionEngine.open(work / f"del-{size}-{r}.db")
        import_backups(engine.store, [folder], max_messages=0)
        conn = engine.store.connection()
        expected = {
            str(sid): int(v)
            for sid, v in conn.execute("SELECT id, display_version FROM sessions").fetchall()
        }
        with engine.store.transaction() as batch:
            start = time.perf_counter()
            kids = delegate_tree(batch, parent)
            _check_expected(batch, parent, kids, expected)
            checks.append(time.perf_counter() - start)
        start = time.perf_counter()
        done = delete_session(engine.store, parent, expected=expected, scrub=False)
        deletes.append(time.perf_counter() - start)
        start = time.perf_counter()
        scrub_wal(engine.store)
        scrubs.append(time.perf_counter() - start)
        assert len(done) == 6
        engine.close()
    emit(f"verified_delete_check_{size}", value=min(checks) * 1000, unit="ms", delegates=5)
    emit(f"verified_delete_txn_{size}", value=min(deletes) * 1000, unit="ms", delegates=5,
         note="whole delete transaction: version check + physical delete of 6 streams")  # fmt: skip
    emit(f"verified_delete_scrub_{size}", value=min(scrubs) * 1000, unit="ms",
         note="WAL checkpoint + truncate after the delete")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Run every figure."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--big", type=int, default=20_000)
    parser.add_argument("--small", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        work = Path(tmp)
        bench_rates(work, args.n, args.sessions, rng)
        for size in (args.small, args.big):
            log(f"verified delete, {size} messages + 5 delegates")
            bench_delete(work, size, rng, args.repeat)


if __name__ == "__main__":
    main()
