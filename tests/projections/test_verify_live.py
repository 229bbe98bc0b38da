"""verify and doctor tell the truth while a writer process appends, and on read-only stores."""

from __future__ import annotations

import ctypes
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.rebuild import verify

ENTRY = "from hermes_es.cli import main; main()"

WRITER = """
import sys, time
from pathlib import Path
from hermes_es.commands.engine import SessionEngine
home, seconds = Path(sys.argv[1]), float(sys.argv[2])
with SessionEngine.open(home) as engine:
    sid = engine.start_session("cli", cwd=str(home))
    n = 0
    engine.append_message(sid, "user", "first message of the writer")
    print("writing", flush=True)
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        n += 1
        engine.append_message(sid, "user", f"message {n} about chat-send and P2.2")
        if n % 50 == 0:
            sid = engine.start_session("cli", cwd=str(home))
    print(n, flush=True)
"""


def make_store(home: Path, sessions: int = 20) -> None:
    """A store with a few sessions of a few messages each."""
    with SessionEngine.open(home) as eng:
        for i in range(sessions):
            sid = eng.start_session("cli", cwd=str(home), title=f"talk {i}")
            for j in range(5):
                eng.append_message(sid, "user", f"question {i}.{j} about zebras")


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A real writer process appending to tmp_path's store for up to 60 seconds."""
    make_store(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path), "60"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()


def hermes(home: Path, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run the real ``hermes`` CLI in a subprocess on ``home``."""
    env = {**os.environ, "HERMES_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,  # type: ignore[call-overload]
    )


def test_verify_agrees_with_a_writer_running(tmp_path: Path, writer: subprocess.Popen[str]) -> None:
    """verify compares log and projections at one snapshot: no DIFF while a writer appends."""
    for _ in range(3):
        diffs = verify(tmp_path / "state.db")
        assert [d for d in diffs if not d.equal] == []
        assert writer.poll() is None


def test_doctor_agrees_with_a_writer_running(tmp_path: Path, writer: subprocess.Popen[str]) -> None:
    """doctor reads the log head and the projections' position in one snapshot: no false lag."""
    for _ in range(4):
        done = hermes(tmp_path, "doctor", "--json")
        assert done.returncode == 0, done.stdout
        rows = {r["check"]: r for r in json.loads(done.stdout)["findings"]}
        assert rows["store.projections"]["level"] == "ok"
        assert rows["store.fts"]["level"] == "ok"
    done = hermes(tmp_path, "sessions", "verify", "--quiet")
    assert done.returncode == 0, done.stdout
    assert writer.poll() is None


def test_verify_lets_the_wal_be_checkpointed_while_it_replays(tmp_path: Path) -> None:
    """Between replay batches verify holds no snapshot, so a writer can truncate the WAL."""
    make_store(tmp_path)
    outcomes: list[str] = []
    engine = SessionEngine.open(tmp_path)

    def progress(done: int, total: int) -> None:
        if outcomes:
            return
        sid = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_message(sid, "user", "written while verify replays")
        conn = engine.store.connection()
        conn.setbusytimeout(300)
        try:
            conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
            outcomes.append("truncated")
        except apsw.BusyError:
            outcomes.append("busy")

    try:
        diffs = verify(tmp_path / "state.db", progress=progress)
    finally:
        engine.close()
    assert outcomes == ["truncated"]
    assert [d for d in diffs if not d.equal] == []


def _drop_file_capabilities() -> None:
    """In the child: give up root's right to ignore file permissions (no-op when not root)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop = 24
    for cap in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _make_read_only(paths: list[Path]) -> None:
    for path in paths:
        mode = path.stat().st_mode
        path.chmod(stat.S_IMODE(mode) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


@pytest.mark.parametrize("directory_too", [False, True], ids=["file", "directory"])
def test_read_only_store_reports_no_damage(tmp_path: Path, directory_too: bool) -> None:
    """doctor and verify on a store the user can only read: healthy, no false index damage."""
    home = tmp_path / "home"
    home.mkdir()
    make_store(home)
    files = sorted(home.glob("state.db*"))
    _make_read_only(files + ([home] if directory_too else []))
    try:
        for args in (("doctor", "--json"), ("doctor", "--full", "--json")):
            done = hermes(home, *args, preexec_fn=_drop_file_capabilities)
            assert done.returncode == 0, (done.stdout, done.stderr)
            rows = {r["check"]: r for r in json.loads(done.stdout)["findings"]}
            assert rows["store.fts"]["level"] == "ok", rows["store.fts"]
            assert rows["store.integrity"]["level"] == "ok"
        done = hermes(home, "sessions", "verify", "--quiet", preexec_fn=_drop_file_capabilities)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert "DIFF" not in done.stdout
        probe = hermes(
            home, "sessions", "rebuild-projections", "--quiet", preexec_fn=_drop_file_capabilities
        )
        assert probe.returncode != 0  # the store really is read-only for the child
    finally:
        home.chmod(0o700)
        for path in files:
            path.chmod(0o600)
