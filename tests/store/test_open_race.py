"""Several connections opening a brand-new state.db at once never see 'database is locked'."""

from __future__ import annotations

import threading
from pathlib import Path

from hermes_es.store.db import open_db


def test_concurrent_first_opens_all_switch_to_wal(tmp_path: Path) -> None:
    """Four threads opening (and writing) a new file together all succeed, in WAL mode."""
    errors: list[str] = []
    for round_ in range(40):
        path = tmp_path / f"state-{round_}.db"
        barrier = threading.Barrier(4)

        def worker(path: Path = path, barrier: threading.Barrier = barrier) -> None:
            try:
                barrier.wait()
                conn = open_db(path)
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("CREATE TABLE IF NOT EXISTS t (a)")
                conn.execute("INSERT INTO t VALUES (1)")
                conn.execute("COMMIT")
                mode = conn.execute("PRAGMA journal_mode").fetchall()[0][0]
                conn.close()
                if mode != "wal":
                    errors.append(f"journal mode {mode}")
            except Exception as exc:  # every failure is collected and reported below
                errors.append(repr(exc))

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
