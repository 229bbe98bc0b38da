"""Benchmark: what "deleted means gone" costs, and what verify costs with a writer running.

1. Delete one session from a store of ``--n`` messages: the delete transaction, then the scrub
   (VACUUM + WAL truncation). Floors in the same run: copying the state.db file byte for byte
   (the least a rewrite can cost) and a bare ``wal_checkpoint(TRUNCATE)``.
2. ``verify`` of the same store. Floor: a plain scan of the ``messages`` table.

Run: ``python -m bench.bench_scrub [--n 20000] [--quick]``
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import apsw

from bench.common import TextGen, emit, log, machine_info, ratio
from hermes_es.commands.delete import delete_session
from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.rebuild import verify
from hermes_es.store.scrub import scrub

BENCH = "bench_scrub"
PER_SESSION = 200


def build(home: Path, n: int) -> list[str]:
    """A store of about ``n`` messages in sessions of PER_SESSION, appended a turn at a time."""
    text = TextGen(seed=3)
    ids: list[str] = []
    with SessionEngine.open(home) as engine:
        for _ in range(max(2, n // PER_SESSION)):
            sid = engine.start_session("cli", cwd="/")
            for _ in range(PER_SESSION // 20):
                engine.append_turn(
                    sid, [{"role": "user", "content": m} for m in text.messages(20, 300)]
                )
            ids.append(sid)
    return ids


def bench_delete(home: Path, ids: list[str], repeat: int) -> None:
    """Delete ``repeat`` sessions one by one: transaction, then scrub, with their floors."""
    db = home / "state.db"
    txn, scrubs, copies, truncates = [], [], [], []
    with SessionEngine.open(home) as engine:
        for sid in ids[:repeat]:
            start = time.perf_counter()
            delete_session(engine.store, sid, scrub=False)
            txn.append(time.perf_counter() - start)
            start = time.perf_counter()
            assert scrub(engine.store.connection(), db, reason="bench", wait_ms=2000)
            scrubs.append(time.perf_counter() - start)
            start = time.perf_counter()
            shutil.copyfile(db, home / "copy.db")
            copies.append(time.perf_counter() - start)
            (home / "copy.db").unlink()
            start = time.perf_counter()
            engine.store.connection().wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
            truncates.append(time.perf_counter() - start)
    size = db.stat().st_size
    emit(BENCH, "delete_txn", value=min(txn) * 1000, unit="ms", messages=PER_SESSION)
    emit(
        BENCH,
        "delete_scrub",
        value=min(scrubs) * 1000,
        unit="ms",
        floor=min(copies) * 1000,
        ratio=ratio(min(scrubs), min(copies)),
        db_mib=round(size / 2**20, 1),
        note="VACUUM + WAL truncate; floor: copying state.db byte for byte",
    )
    emit(BENCH, "bare_truncate", value=min(truncates) * 1000, unit="ms")


def bench_verify(home: Path, repeat: int) -> None:
    """verify of the store; floor: a plain scan of every message row."""
    db = home / "state.db"
    runs, scans = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        diffs = verify(db)
        runs.append(time.perf_counter() - start)
        assert all(d.equal for d in diffs)
        conn = apsw.Connection(str(db))
        start = time.perf_counter()
        rows = sum(1 for _ in conn.execute("SELECT id, content FROM messages"))
        scans.append(time.perf_counter() - start)
        conn.close()
    emit(
        BENCH,
        "verify",
        value=min(runs),
        unit="s",
        floor=min(scans),
        ratio=ratio(min(runs), min(scans)),
        messages=rows,
        note="floor: plain scan of the messages table",
    )


def main() -> None:
    """Build a store, then time delete + scrub and verify."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20_000, help="messages in the store")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a 4,000-message store")
    args = parser.parse_args()
    n = 4_000 if args.quick else args.n
    emit(BENCH, "machine", **machine_info())
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        log(f"building a store of {n} messages")
        ids = build(home, n)
        log("delete + scrub")
        bench_delete(home, ids, args.repeat)
        log("verify")
        bench_verify(home, args.repeat)


if __name__ == "__main__":
    main()
