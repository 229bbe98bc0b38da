"""Crash safety: a writer process killed with SIGKILL loses no acknowledged append."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.rebuild import verify

CHILD = r"""
import sys
from hermes_es.commands.engine import SessionEngine

home, sid, round_ = sys.argv[1], sys.argv[2], sys.argv[3]
engine = SessionEngine.open(home, actor="crash-child")
i = 0
while True:
    uid = f"r{round_}-{i}"
    if i % 5 == 4:
        call = f"call-{uid}"
        seqs = engine.append_turn(sid, [
            {"role": "assistant", "content": "", "tool_calls": [{"id": call, "name": "ls"}],
             "uid": uid + "-a"},
            {"role": "tool", "content": f"out {uid} " * 20, "tool_call_id": call,
             "uid": uid + "-t"},
            {"role": "assistant", "content": f"reply {uid}", "uid": uid},
        ])
        seq = seqs[-1]
    else:
        seq = engine.append_message(sid, "user", f"message {uid} " + "x" * (i % 50), uid=uid)
    sys.stdout.write(f"{uid} {seq}\n")
    sys.stdout.flush()
    i += 1
"""


def run_and_kill(home: Path, sid: str, round_: int, acks: int) -> dict[str, int]:
    """Run the child until it acknowledged ``acks`` appends, SIGKILL it; return uid -> seq."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(home), sid, str(round_)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    acked: dict[str, int] = {}
    try:
        for line in proc.stdout:
            uid, seq = line.split()
            acked[uid] = int(seq)
            if len(acked) >= acks:
                os.kill(proc.pid, signal.SIGKILL)
                break
        else:
            pytest.fail(
                f"child exited early: {proc.wait()} {proc.stderr.read() if proc.stderr else ''}"
            )
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for line in rest.splitlines():  # lines already in the pipe were committed too
        if line.count(" ") == 1:
            uid, seq = line.split()
            acked[uid] = int(seq)
    assert proc.returncode == -signal.SIGKILL
    return acked


def check_store(home: Path, sid: str, acked: dict[str, int]) -> None:
    """Verify passes and every acknowledged uid is stored once, at its acknowledged seq."""
    db = home / "state.db"
    assert [d.table for d in verify(db) if not d.equal] == []
    conn = apsw.Connection(str(db))
    try:
        stored = {
            str(uid): int(seq)
            for uid, seq in conn.execute(
                "SELECT uid, seq FROM message_rows WHERE session_id = ?", (sid,)
            ).fetchall()
        }
        seqs = sorted(
            int(r[0])
            for r in conn.execute("SELECT seq FROM message_rows WHERE session_id = ?", (sid,))
        )
        dupes = conn.execute(
            "SELECT uid FROM message_rows GROUP BY session_id, uid HAVING COUNT(*) > 1"
        ).fetchall()
    finally:
        conn.close()
    missing = {u: s for u, s in acked.items() if stored.get(u) != s}
    assert missing == {}
    assert seqs == list(range(len(seqs)))
    assert dupes == []
    with SessionEngine.open(home) as engine:
        state = engine.get(sid)
        assert state.next_seq == len(seqs) == state.message_count


def crash_rounds(home: Path, rounds: list[int]) -> None:
    """Kill a writer once per entry of ``rounds`` (acks before the kill); check after each."""
    with SessionEngine.open(home) as engine:
        sid = engine.start_session("cli", cwd="")
    acked: dict[str, int] = {}
    for round_, acks in enumerate(rounds):
        acked.update(run_and_kill(home, sid, round_, acks))
        check_store(home, sid, acked)
    with SessionEngine.open(home) as engine:
        expected = engine.get(sid).next_seq
        assert expected > max(acked.values())
        assert engine.append_message(sid, "user", "after the crashes") == expected


def test_sigkill_loses_no_acknowledged_append(home: Path) -> None:
    """After each SIGKILL, verify passes and every acknowledged append is there, once."""
    crash_rounds(home, [200, 37, 120])


@pytest.mark.slow
def test_sigkill_many_rounds(home: Path) -> None:
    """Many kill rounds at varied points, on one growing store."""
    crash_rounds(home, [2000, 1, 523, 77, 1500, 3, 999, 250, 1200, 10])
