"""Closing a datastore while another thread is still running a statement on its connection."""

from __future__ import annotations

import threading
from pathlib import Path

from hermes_es.store.recorder import ApswDatastore


def test_close_waits_for_a_statement_running_in_another_thread(tmp_path: Path) -> None:
    """``close`` waits for another thread's statement to finish instead of raising."""
    store = ApswDatastore(tmp_path / "state.db")
    store.connection()
    started = threading.Event()
    result: list[int] = []

    def slow_read() -> None:
        conn = store.connection()
        started.set()
        rows = conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)"
            " SELECT COUNT(*) FROM n"
        ).fetchall()
        result.append(int(rows[0][0]))

    worker = threading.Thread(target=slow_read)
    worker.start()
    started.wait(5)
    store.close()
    worker.join(5)
    assert result == [300000]
