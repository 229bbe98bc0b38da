"""Four writer processes on one state.db: no error reaches a caller, nothing lost or
duplicated, and every session's sequence numbers stay contiguous in each writer's order."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import apsw
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.rebuild import verify

WRITER = r"""
import sys
from hermes_es.commands.engine import SessionEngine

home, sid, name, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
engine = SessionEngine.open(home, actor=name)
print("ready", flush=True)
sys.stdin.readline()  # wait for the parent's "go" so the writers overlap
for i in range(count):
    uid = f"{name}-{i}"
    if i % 4 == 3:
        call = f"{uid}-call"
        engine.append_turn(sid, [
            {"role": "assistant", "content": "", "tool_calls": [{"id": call, "name": "ls"}],
             "uid": uid + "-a"},
            {"role": "tool", "content": f"{name} out {i}", "tool_call_id": call, "uid": uid},
        ])
    else:
        seq = engine.append_message(sid, "user", f"{name} says {i}", uid=uid)
        if i % 7 == 0:  # a client retry of the same uid must return the same seq
            assert engine.append_message(sid, "user", f"{name} says {i}", uid=uid) == seq
    if i % 25 == 0:
        engine.set_title(sid, "")  # a curation write in between appends
engine.close()
print("done", flush=True)
"""


def run_writers(home: Path, plan: list[tuple[str, str]], count: int) -> None:
    """Start one writer per (name, session) in ``plan``, release them together, wait."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(home), sid, name, str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, sid in plan
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = [proc.communicate(timeout=300) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for (name, _), proc, (out, err) in zip(plan, procs, results, strict=True):
        assert (name, proc.returncode, err) == (name, 0, "")
        assert out.strip() == "done"


def check(home: Path, plan: list[tuple[str, str]], count: int, *, turns: bool = True) -> None:
    """Every uid once, per-session seqs contiguous, each writer's messages in its own order."""
    db = home / "state.db"
    assert [d.table for d in verify(db) if not d.equal] == []
    conn = apsw.Connection(str(db))
    try:
        rows = conn.execute(
            "SELECT session_id, seq, uid FROM message_rows ORDER BY session_id, seq"
        )
        by_session: dict[str, list[tuple[int, str]]] = {}
        for sid, seq, uid in rows:
            by_session.setdefault(str(sid), []).append((int(seq), str(uid)))
    finally:
        conn.close()
    uids = Counter(uid for msgs in by_session.values() for _, uid in msgs)
    assert [u for u, n in uids.items() if n > 1] == []
    per_message = count + count // 4 if turns else count  # a turn adds two messages
    writers_of: Counter[str] = Counter(sid for _, sid in plan)
    with SessionEngine.open(home) as engine:
        for sid, writers in writers_of.items():
            msgs = by_session[sid]
            assert [seq for seq, _ in msgs] == list(range(writers * per_message))
            state = engine.get(sid)
            assert state.message_count == state.next_seq == len(msgs)
    for name, sid in plan:
        mine = [(seq, uid) for seq, uid in by_session[sid] if uid.startswith(f"{name}-")]
        assert len(mine) == per_message
        order = [int(uid.split("-")[1]) for _, uid in mine if not uid.endswith("-a")]
        assert order == list(range(count))


def sessions(home: Path, n: int) -> list[str]:
    """Create ``n`` sessions and return their ids."""
    with SessionEngine.open(home) as engine:
        return [engine.start_session("cli", cwd="") for _ in range(n)]


def test_four_writers_shared_and_separate_sessions(home: Path) -> None:
    """Two writers share a session and two write their own: all appends land, in order."""
    a, b, c = sessions(home, 3)
    plan = [("w1", a), ("w2", a), ("w3", b), ("w4", c)]
    run_writers(home, plan, 120)
    check(home, plan, 120)


def test_four_writers_one_session(home: Path) -> None:
    """Four writers on one session interleave without loss, duplication or gaps."""
    [a] = sessions(home, 1)
    plan = [(f"w{i}", a) for i in range(1, 5)]
    run_writers(home, plan, 80)
    check(home, plan, 80)


def test_four_threads_share_one_engine(home: Path) -> None:
    """Four threads appending through one engine (a connection each) lose nothing."""
    a, b = sessions(home, 2)
    errors: list[BaseException] = []
    with SessionEngine.open(home) as engine:

        def write(name: str, sid: str) -> None:
            try:
                for i in range(60):
                    engine.append_message(sid, "user", f"{name} {i}", uid=f"{name}-{i}")
            except BaseException as exc:  # reported below: no error may reach a caller
                errors.append(exc)

        threads = [
            threading.Thread(target=write, args=(f"t{i}", a if i < 2 else b)) for i in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert errors == []
        assert (engine.get(a).message_count, engine.get(b).message_count) == (120, 120)
    check(home, [("t0", a), ("t1", a), ("t2", b), ("t3", b)], 60, turns=False)


@pytest.mark.slow
def test_four_writers_long_run(home: Path) -> None:
    """The mixed plan with many more appends per writer."""
    a, b, c = sessions(home, 3)
    plan = [("w1", a), ("w2", a), ("w3", b), ("w4", c)]
    run_writers(home, plan, 3000)
    check(home, plan, 3000)
