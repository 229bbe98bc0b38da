"""Deleted means gone: byte scans of state.db, -wal and -shm after every delete route."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import apsw
import pytest

from hermes_es.commands.delete import delete_many, delete_session
from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.rebuild import rebuild
from hermes_es.store import codec
from hermes_es.store.db import checkpoint
from hermes_es.store.scrub import pending_path

ENTRY = "from hermes_es.cli import main; main()"

MARKERS = (b"DOOMCONTENT", b"DOOMTITLE", b"DOOMTOOLOUT", b"DOOMPROMPT")

STALLED = """
import sys, time
from hermes_es.projections.rebuild import {what}
def stall(done, total):
    print("stalled", flush=True)
    time.sleep(120)
{what}(sys.argv[1], progress=stall)
"""

READER = """
import sys, apsw
conn = apsw.Connection(sys.argv[1])
conn.execute("BEGIN")
conn.execute("SELECT COUNT(*) FROM message_rows").fetchall()
print("reading", flush=True)
sys.stdin.readline()
"""


def traces(
    folder: Path, markers: tuple[bytes, ...] = MARKERS, frames: Sequence[bytes] = ()
) -> dict[str, list[str]]:
    """Which store files (state.db, -wal, -shm, anything beside them) still hold a marker, or
    a piece of one of ``frames`` (stored event payloads: the text is only there, compressed)."""
    out: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            found = [m.decode() for m in markers if m in data]
            found += [f"frame {i}" for i, f in enumerate(frames) if f in data]
            if found:
                out[str(path.relative_to(folder))] = found
    return out


def stored_frames(engine: SessionEngine, *session_ids: str) -> list[bytes]:
    """A 24-byte piece from the middle of every compressed event payload of the sessions,
    checked to be on disk now (so a scan for them after a delete can fail)."""
    conn = engine.store.connection()
    marks = ",".join("?" * len(session_ids))
    rows = conn.execute(
        f"SELECT state FROM events WHERE originator_id IN ({marks})", session_ids
    ).fetchall()
    pieces = []
    for (state,) in rows:
        frame = bytes(state)
        if codec.is_packed(frame) and len(frame) >= 40:
            middle = len(frame) // 2
            pieces.append(frame[middle - 12 : middle + 12])
    assert pieces, "no compressed payloads: the frame scan would prove nothing"
    with contextlib.suppress(apsw.BusyError):  # the background checkpointer may be mid-copy
        checkpoint(conn, truncate=False)  # the WAL is scanned too, so a skipped copy is fine
    on_disk = b"".join(p.read_bytes() for p in engine.db_path.parent.glob("state.db*"))
    assert all(p in on_disk for p in pieces)
    return pieces


def doomed_session(engine: SessionEngine, tag: str = "") -> str:
    """A session whose content, title, tool output and prompt carry the markers."""
    sid = engine.start_session(
        "cli", cwd="/", title=f"DOOMTITLE{tag}", system_prompt=f"You are DOOMPROMPT{tag}."
    )
    engine.append_message(sid, "user", f"DOOMCONTENT{tag} please list files " + "x " * 40)
    engine.append_turn(
        sid,
        [
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "ls"}]},
            {"role": "tool", "content": f"DOOMTOOLOUT{tag} a.txt b.txt", "tool_call_id": "c1"},
            {"role": "assistant", "content": "two files"},
        ],
    )
    return sid


def bystanders(engine: SessionEngine, count: int = 3) -> None:
    """Sessions that stay, so the store is not empty after the delete."""
    for i in range(count):
        sid = engine.start_session("cli", cwd="/", title=f"keep {i}")
        for j in range(10):
            engine.append_message(sid, "user", f"keep message {i}.{j} " + "lorem " * 30)


def test_delete_after_rebuild_leaves_no_copy(tmp_path: Path) -> None:
    """The generation a rebuild drops is zeroed: a later delete leaves no copy anywhere."""
    with SessionEngine.open(tmp_path) as engine:
        sid = doomed_session(engine)
        bystanders(engine)
        rebuild(engine.db_path)
        rebuild(engine.db_path)
        frames = stored_frames(engine, sid)
        delete_session(engine.store, sid)
    assert traces(tmp_path, frames=frames) == {}


def _stalled(tmp_path: Path, what: str, env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", STALLED.format(what=what), str(tmp_path / "state.db")],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "stalled"
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.stdout is not None
    proc.stdout.close()


def test_killed_rebuild_is_cleaned_and_scrubbed_on_next_open(tmp_path: Path) -> None:
    """A SIGKILLed rebuild's rebuild_* tables are dropped (zeroed) when the store is next opened."""
    with SessionEngine.open(tmp_path) as engine:
        sid = doomed_session(engine)
        bystanders(engine)
    proc = _stalled(tmp_path, "rebuild", dict(os.environ))
    _kill(proc)
    probe = apsw.Connection(str(tmp_path / "state.db"))
    try:
        left = probe.execute("SELECT name FROM sqlite_schema WHERE name LIKE 'rebuild%'")
        assert left.fetchall(), "the killed rebuild left no tables: the test proves nothing"
    finally:
        probe.close()
    doctor = hermes(tmp_path, "doctor", "--json")
    rows = {r["check"]: r for r in json.loads(doctor.stdout)["findings"]}
    assert rows["store.leftovers"]["level"] == "warning"
    with SessionEngine.open(tmp_path) as engine:
        conn = engine.store.connection()
        assert (
            conn.execute("SELECT name FROM sqlite_schema WHERE name LIKE 'rebuild%'").fetchall()
            == []
        )
        frames = stored_frames(engine, sid)
        delete_session(engine.store, sid)
    assert traces(tmp_path, frames=frames) == {}


def test_killed_verify_leaves_no_scratch_copy(tmp_path: Path) -> None:
    """A SIGKILLed verify leaves no scratch file, beside the store or in the temp directory."""
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    with SessionEngine.open(home) as engine:
        sid = doomed_session(engine)
        bystanders(engine)
    proc = _stalled(home, "verify", {**os.environ, "TMPDIR": str(tmp), "SQLITE_TMPDIR": str(tmp)})
    try:
        assert [p.name for p in home.iterdir() if p.name.startswith(".verify")] == []
    finally:
        _kill(proc)
    assert list(tmp.iterdir()) == []
    assert [p.name for p in home.iterdir() if p.name.startswith(".verify")] == []
    with SessionEngine.open(home) as engine:
        delete_session(engine.store, sid)
    assert traces(tmp_path) == {}


def test_stale_verify_scratch_files_are_shredded_on_open(tmp_path: Path) -> None:
    """A .verify-*.db scratch copy an older verify left beside state.db is removed on open."""
    with SessionEngine.open(tmp_path) as engine:
        doomed_session(engine)
    stale = tmp_path / ".verify-k3j2.db"
    stale.write_bytes(b"SQLite format 3\0" + b"DOOMCONTENT copy " * 100)
    (tmp_path / ".verify-k3j2.db-wal").write_bytes(b"DOOMTITLE copy")
    SessionEngine.open(tmp_path).close()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".verify")] == []


def _large_delete(tmp_path: Path, sessions: int) -> None:
    rng = random.Random(1)
    doomed: list[str] = []
    with SessionEngine.open(tmp_path) as engine:
        for i in range(sessions):
            mine = i % 2 == 0
            word = "DOOM" if mine else "keep"
            sid = engine.start_session(
                "cli",
                cwd="/",
                title=f"{word}TITLE{i}",
                system_prompt=f"{word}PROMPT{i}" if mine else "keep prompt",
            )
            for j in range(rng.randint(1, 8)):
                filler = "".join(rng.choice("abcdefgh ") for _ in range(rng.randint(10, 3000)))
                engine.append_message(sid, "user", f"{word}CONTENT{i}x{j} zqdoomterm{i} {filler}")
                call = {"id": f"c{j}", "name": "ls"}
                engine.append_turn(
                    sid,
                    [
                        {"role": "assistant", "content": "", "tool_calls": [call]},
                        {
                            "role": "tool",
                            "content": f"{word}TOOLOUT{i} " * 20,
                            "tool_call_id": f"c{j}",
                        },
                        {"role": "assistant", "content": f"{word} reply"},
                    ],
                )
            if mine:
                doomed.append(sid)
        frames = stored_frames(engine, *doomed)
        delete_many(engine.store, doomed, reason="delete")
        conn = engine.store.connection()
        conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, messages_fts, row)")
        terms = conn.execute("SELECT term FROM temp.v WHERE term LIKE 'zqdoomterm%'").fetchall()
        kept = {int(t[0].removeprefix("zqdoomterm")) for t in terms}
        assert kept and all(n % 2 == 1 for n in kept)
        conn.execute("DROP TABLE temp.v")
    assert traces(tmp_path, frames=frames) == {}
    from hermes_es.commands.optimize import optimize_store

    optimize_store(tmp_path / "state.db")
    assert traces(tmp_path, frames=frames) == {}


def test_large_delete_leaves_no_body_in_any_page(tmp_path: Path) -> None:
    """Deleting many sessions at once leaves no message, tool output, title or prompt in live
    or free pages, and no deleted word in the search index, even after optimize (bounded)."""
    _large_delete(tmp_path, 100)


@pytest.mark.slow
def test_large_delete_of_hundreds_of_sessions_leaves_no_copy(tmp_path: Path) -> None:
    """The same with 300 sessions: large enough that b-tree balancing during the delete
    leaves stale copies in page gaps, which only the post-delete rewrite removes."""
    _large_delete(tmp_path, 300)


def hermes(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real ``hermes`` CLI in a subprocess on ``home``."""
    env = {**os.environ, "HERMES_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_verified_delete_under_a_reader_says_so_and_finishes_when_it_leaves(
    tmp_path: Path,
) -> None:
    """--delete-after-verified with a reader holding a snapshot: warns, records the pending
    scrub (doctor reports it), and the scrub completes by itself once the reader is gone."""
    home = tmp_path / "home"
    home.mkdir()
    with SessionEngine.open(home) as engine:
        sid = doomed_session(engine)
        bystanders(engine)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(home / "state.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "reading"
        out = tmp_path / "export"
        done = hermes(
            home, "sessions", "export", "--session-id", sid, "--format", "jsonl",
            str(out), "--delete-after-verified", "--yes",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert "warning: deleted, but another process still reads state.db" in done.stderr
        assert pending_path(home / "state.db").exists()
        doctor = hermes(home, "doctor", "--json")
        rows = {r["check"]: r for r in json.loads(doctor.stdout)["findings"]}
        assert rows["store.scrub"]["level"] == "warning"
        assert "not yet scrubbed" in rows["store.scrub"]["message"]
    finally:
        assert reader.stdin is not None
        reader.stdin.write("\n")
        reader.stdin.close()
        reader.wait(timeout=30)
        assert reader.stdout is not None
        reader.stdout.close()
    deadline = time.monotonic() + 30
    while pending_path(home / "state.db").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pending_path(home / "state.db").exists()
    assert traces(home) == {}
    doctor = hermes(home, "doctor", "--json")
    rows = {r["check"]: r for r in json.loads(doctor.stdout)["findings"]}
    assert rows["store.scrub"]["level"] == "ok"


HOLDER = """
import sys, apsw
conn = apsw.Connection(sys.argv[1])
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
conn.execute("INSERT INTO t VALUES ('scratch in use')")
print("open", flush=True)
sys.stdin.readline()
"""


def test_scratch_file_another_process_has_open_is_left_alone(tmp_path: Path) -> None:
    """A .verify-*.db that a running (older) verify still has open is not shredded."""
    SessionEngine.open(tmp_path).close()
    busy = tmp_path / ".verify-busy.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(busy)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        SessionEngine.open(tmp_path).close()
        assert busy.exists()
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=30)
        assert holder.stdout is not None
        holder.stdout.close()
    SessionEngine.open(tmp_path).close()
    assert not busy.exists()
