"""``hermes sessions copy-store``: SQLite → PostgreSQL and back, resumable, digests equal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import psycopg
import pytest
from click.testing import CliRunner

from hermes_es.cli.app import cli
from hermes_es.commands.copy_store import copy_store, log_digest
from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import SessionNotFoundError, ValidationError
from hermes_es.store.backend import open_backend
from tests.projections.test_rebuild import populate


def _copy(src: str, dst: str, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["sessions", "copy-store", src, dst, *extra])
    return result.exit_code, result.output


def _view(target: str | Path) -> tuple[list[str], list[tuple[str, int]], list[str]]:
    """What a person sees: the list, a search, and the transcript of every session."""
    with SessionEngine.open(target) as eng:
        conn = eng.store.connection()
        ids = sorted(str(r[0]) for r in conn.execute("SELECT id FROM sessions"))
        hits = sorted((h.session_id, h.seq) for h in eng.search("files", limit=50))
        from hermes_es.queries.transcript import messages_of

        texts = [f"{sid}:{m.seq}:{m.content}" for sid in ids for m in messages_of(conn, sid)]
    return ids, hits, texts


def test_round_trip_sqlite_postgres_sqlite(tmp_path: Path, pg_url: str) -> None:
    """A store with edits, rewinds, compaction, a continuation, a prompt and a delete is copied
    to PostgreSQL and back: digests equal at each hop, verify passes, the same view."""
    source = tmp_path / "source.db"
    with SessionEngine.open(source, actor="test") as eng:
        populate(eng)
    back = tmp_path / "back.db"
    code, out = _copy(str(source), pg_url, "--verify")
    assert code == 0, out
    assert "target verified" in out
    code, out = _copy(pg_url, str(back), "--verify", "--json")
    assert code == 0, out
    summary = json.loads(out)
    assert summary["digests_equal"] is True and summary["verify_failed"] == []
    digests = set()
    for target in (source, pg_url, back):
        with SessionEngine.open(target) as eng:
            digests.add(log_digest(eng.store.connection()))
    assert len(digests) == 1
    assert _view(source) == _view(pg_url) == _view(back)
    assert _view(source)[1]  # the search finds something


def test_target_with_other_events_is_refused(tmp_path: Path, pg_url: str) -> None:
    """A target holding its own sessions is refused, and keeps exactly what it had."""
    source = tmp_path / "source.db"
    with SessionEngine.open(source) as eng:
        eng.start_session("cli", cwd="")
    with SessionEngine.open(pg_url) as eng:
        eng.start_session("cli", cwd="", title="mine")
    with pytest.raises(ValidationError, match="already holds 1 events"):
        copy_store(open_backend(str(source)), open_backend(pg_url))
    code, out = _copy(str(source), pg_url)
    assert code == 1
    assert "already holds" in out and "Traceback" not in out
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT title FROM sessions").fetchall() == [("mine",)]


def test_same_or_missing_source_is_refused(tmp_path: Path) -> None:
    """Copying a store onto itself, or from a store that does not exist, is refused."""
    db = tmp_path / "a.db"
    with pytest.raises(ValidationError, match="same store"):
        copy_store(open_backend(str(db)), open_backend(str(db)))
    with pytest.raises(SessionNotFoundError, match="does not exist"):
        copy_store(open_backend(str(db)), open_backend(str(tmp_path / "b.db")))
    assert not db.exists()


def _copied_so_far(target: str) -> int:
    """How far the copy into ``target`` (a URL or a state.db path) has come, from its tracking."""
    query = "SELECT notification_id FROM tracking WHERE application_name LIKE 'copy-store:%'"
    if target.startswith("postgresql://"):
        with psycopg.connect(target) as conn:
            if conn.execute("SELECT to_regclass('tracking')").fetchone() == (None,):
                return 0
            row = conn.execute(query).fetchone()
        return int(row[0]) if row else 0
    if not Path(target).exists():
        return 0
    conn = apsw.Connection(target, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        conn.set_busy_timeout(5000)
        tables = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'tracking'").fetchall()
        found = conn.execute(query).fetchall() if tables else []
    finally:
        conn.close()
    return int(found[0][0]) if found else 0


def _seeded(path: Path) -> int:
    """A SQLite store of 8 sessions and about 500 events; returns its event count."""
    with SessionEngine.open(path) as eng:
        for n in range(8):
            sid = eng.start_session("cli", cwd="")
            eng.append_turn(sid, [{"role": "user", "content": f"m{n}-{i}"} for i in range(3)])
            for i in range(60):
                eng.append_message(sid, "user", f"session {n} message {i}")
        return log_digest(eng.store.connection())[0]


@pytest.mark.parametrize("direction", ["sqlite-to-postgresql", "postgresql-to-sqlite"])
def test_copy_killed_midway_resumes(tmp_path: Path, pg_url: str, direction: str) -> None:
    """A copy killed by SIGKILL after some batches is finished by running it again, either way:
    the second run copies exactly the rest, its progress starting where the first stopped, and
    both logs have the same digest."""
    sqlite = tmp_path / "source.db"
    total = _seeded(sqlite)
    source, target = str(sqlite), pg_url
    if direction == "postgresql-to-sqlite":
        code, out = _copy(str(sqlite), pg_url, "--quiet")
        assert code == 0, out
        source, target = pg_url, str(tmp_path / "target.db")
    main = "from hermes_es.cli import main; main()"
    argv = [sys.executable, "-c", main, "sessions", "copy-store", source, target]
    env = {**os.environ, "HERMES_COPY_BATCH": "5", "HERMES_HOME": str(tmp_path)}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while _copied_so_far(target) < 40 and proc.poll() is None:
            assert time.monotonic() < deadline, "the copy made no progress"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.communicate(timeout=30)
    interrupted = _copied_so_far(target)
    assert proc.returncode == -signal.SIGKILL
    assert 0 < interrupted < total
    seen: list[tuple[int, int]] = []
    done = copy_store(open_backend(source), open_backend(target), progress=_record(seen))
    assert (done.copied, done.digest) == (total - interrupted, done.target_digest)
    assert seen[0][0] > interrupted and seen[-1] == (total, total)
    code, out = _copy(source, target, "--verify")
    assert code == 0, out
    assert "target verified" in out
    with SessionEngine.open(source) as a, SessionEngine.open(target) as b:
        assert log_digest(a.store.connection()) == log_digest(b.store.connection())


def _record(seen: list[tuple[int, int]]) -> Callable[[int, int], None]:
    def progress(done: int, total: int) -> None:
        seen.append((done, total))

    return progress


@pytest.mark.parametrize("direction", ["sqlite-to-postgresql", "postgresql-to-sqlite"])
def test_copy_reports_progress(
    tmp_path: Path, pg_url: str, direction: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy reports (done, total) after every batch, either way: rising by the batch size
    up to (total, total)."""
    sqlite = tmp_path / "source.db"
    total = _seeded(sqlite)
    source, target = str(sqlite), pg_url
    if direction == "postgresql-to-sqlite":
        copy_store(open_backend(source), open_backend(target))
        source, target = pg_url, str(tmp_path / "target.db")
    seen: list[tuple[int, int]] = []
    monkeypatch.setenv("HERMES_COPY_BATCH", "50")
    copy_store(open_backend(source), open_backend(target), progress=_record(seen))
    expected = [(min(n, total), total) for n in range(50, total + 50, 50)]
    assert seen == expected


def test_cli_copy_draws_its_progress_on_a_terminal(tmp_path: Path, pg_url: str) -> None:
    """On a terminal ``copy-store`` draws its progress bar, ending at every event copied."""
    import pexpect

    sqlite = tmp_path / "source.db"
    total = _seeded(sqlite)
    env = {**os.environ, "HERMES_COPY_BATCH": "50", "HERMES_HOME": str(tmp_path), "COLUMNS": "120"}
    main = "from hermes_es.cli import main; main()"
    child = pexpect.spawn(
        sys.executable,
        ["-c", main, "sessions", "copy-store", str(sqlite), pg_url],
        env=env,
        encoding="utf-8",
        timeout=120,
        dimensions=(24, 120),
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    screen = child.before
    assert "copying" in screen and f"{total}/{total}" in screen, screen
