"""After a delete: the WAL scrub, its report when blocked, and stored prompts that go too."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from hermes_es.commands.delete import delete_session, scrub_wal
from hermes_es.commands.engine import SessionEngine
from hermes_es.store import codec
from hermes_es.store.db import checkpoint

ENTRY = "from hermes_es.cli import main; main()"

READER = """
import sys, apsw
conn = apsw.Connection(sys.argv[1])
conn.execute("BEGIN")
conn.execute("SELECT COUNT(*) FROM message_rows").fetchall()
print("reading", flush=True)
sys.stdin.readline()
"""


def traces(home: Path, marker: bytes, frames: Sequence[bytes] = ()) -> list[str]:
    """Files of the store that still hold ``marker`` or a piece of one of ``frames``."""
    found = []
    for f in home.glob("state.db*"):
        data = f.read_bytes()
        if marker in data or any(piece in data for piece in frames):
            found.append(f.name)
    return found


def frame_pieces(engine: SessionEngine, sid: str) -> list[bytes]:
    """24 bytes from the middle of each compressed payload of the session (message text is
    stored only there), checked to be on disk now so the scan after the delete can fail."""
    conn = engine.store.connection()
    states = [bytes(r[0]) for r in conn.execute(
        "SELECT state FROM events WHERE originator_id = ?", (sid,)
    )]  # fmt: skip
    pieces = [s[len(s) // 2 - 12 : len(s) // 2 + 12] for s in states if codec.is_packed(s)]
    pieces = [p for p in pieces if len(p) == 24]
    checkpoint(conn, truncate=False)
    assert pieces and traces(engine.db_path.parent, b"\xffno such marker\xff", pieces)
    return pieces


def test_blocked_scrub_is_reported_and_finished_later(tmp_path: Path) -> None:
    """A reader holding an old snapshot blocks the scrub: the delete commits, says so, exits 0."""
    with SessionEngine.open(tmp_path) as engine:
        sid = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_message(sid, "user", "MARKER-9c1e private words " * 4)
        pieces = frame_pieces(engine, sid)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(tmp_path / "state.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "reading"
        env = {**os.environ, "HERMES_HOME": str(tmp_path)}
        done = subprocess.run(
            [sys.executable, "-c", ENTRY, "sessions", "delete", sid, "--yes"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert f"deleted {sid}" in done.stdout
        assert "warning: deleted, but another process still reads state.db" in done.stderr
        assert "Traceback" not in done.stderr
    finally:
        assert reader.stdin is not None
        reader.stdin.write("\n")
        reader.stdin.close()
        reader.wait(timeout=30)
        assert reader.stdout is not None
        reader.stdout.close()
    with SessionEngine.open(tmp_path) as engine:
        assert engine.search("MARKER-9c1e") == []
        assert scrub_wal(engine.store)
    assert traces(tmp_path, b"MARKER-9c1e", pieces) == []


def test_last_session_using_a_prompt_takes_it_along(tmp_path: Path) -> None:
    """A stored prompt (it embeds memory text) is erased with the last session that sends it."""
    with SessionEngine.open(tmp_path) as engine:
        shared = "You are Hermes. MEMORY: PRIVMEM-51d7 likes tea."
        one = engine.start_session("cli", system_prompt=shared, cwd=str(tmp_path))
        two = engine.start_session("cli", system_prompt=shared, cwd=str(tmp_path))
        delete_session(engine.store, one)
        assert engine.stored_prompt(two) == shared  # still used by the other session
        delete_session(engine.store, two)
        conn = engine.store.connection()
        assert conn.execute("SELECT COUNT(*) FROM prompts").fetchall()[0][0] == 0
        assert not conn.execute(
            "SELECT 1 FROM events WHERE originator_id LIKE 'prompt:%'"
        ).fetchall()
    assert traces(tmp_path, b"PRIVMEM-51d7") == []
