"""The engine and the CLI on a PostgreSQL store: writers, conflicts, read commands, maintenance."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from hermes_es.cli.app import cli
from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import ConflictError, StoreError
from hermes_es.store.backend import STORE_URL_ENV
from tests.commands.test_concurrency import run_writers


def test_conflict_between_two_engines(pg_url: str) -> None:
    """Two engines (two pools) on one database: the stale expected version is refused."""
    with SessionEngine.open(pg_url) as first, SessionEngine.open(pg_url) as second:
        sid = first.start_session("cli", cwd="")
        version = second.get(sid).version
        first.append_message(sid, "user", "winner", expected_version=version)
        with pytest.raises(ConflictError):
            second.append_message(sid, "user", "loser", expected_version=version)
        assert second.get(sid).message_count == 1


def test_writer_processes_lose_and_duplicate_nothing(pg_url: str) -> None:
    """Three writer processes on one session and one of their own: every uid stored once,
    sequence numbers contiguous, each writer's messages in its order, verify clean."""
    with SessionEngine.open(pg_url) as engine:
        shared, own = (engine.start_session("cli", cwd="") for _ in range(2))
    plan = [("w1", shared), ("w2", shared), ("w3", shared), ("w4", own)]
    count = 12
    run_writers(pg_url, plan, count)  # type: ignore[arg-type]
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT session_id, seq, uid FROM messages ORDER BY session_id, seq"
        ).fetchall()
    uids = Counter(uid for _, _, uid in rows)
    assert [u for u, n in uids.items() if n > 1] == []
    per_writer = count + count // 4
    for sid, writers in ((shared, 3), (own, 1)):
        assert [seq for s, seq, _ in rows if s == sid] == list(range(writers * per_writer))
    for name, sid in plan:
        order = [
            int(uid.split("-")[1])
            for s, _, uid in rows
            if s == sid and uid.startswith(f"{name}-") and not uid.endswith("-a")
        ]
        assert order == list(range(count))
    with SessionEngine.open(pg_url) as engine:
        assert [d.table for d in engine.backend.verify() if not d.equal] == []


def _run(url: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--store", url, *args], env={"HERMES_HOME": "/nonexistent"})
    return result.exit_code, result.output


def test_cli_read_and_maintenance_commands_on_postgres(pg_url: str) -> None:
    """list, search, show, history, stats, rebuild-projections and verify work on a server
    store."""
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", title="server side", cwd="/srv/app")
        eng.append_message(sid, "user", "where is chat-send defined?")
        eng.append_message(sid, "assistant", "in the gateway module")
    code, out = _run(pg_url, "sessions", "list", "--json")
    assert code == 0, out
    assert [r["title"] for r in json.loads(out)] == ["server side"]
    code, out = _run(pg_url, "sessions", "search", "chat-send", "--json")
    assert code == 0, out
    assert sid in out
    code, out = _run(pg_url, "sessions", "show", sid)
    assert code == 0, out
    assert "gateway module" in out
    code, out = _run(pg_url, "sessions", "history", sid)
    assert code == 0, out
    code, out = _run(pg_url, "sessions", "stats", "--json")
    assert code == 0, out
    stats = json.loads(out)
    assert (stats["messages"], stats["events"], stats["path"]) == (2, 3, pg_url)
    code, out = _run(pg_url, "sessions", "rebuild-projections", "--quiet")
    assert (code, out.strip()) == (0, "rebuilt projections from 3 events")
    code, out = _run(pg_url, "sessions", "verify", "--json")
    assert code == 0, out
    assert json.loads(out)["ok"] is True


def test_cli_takes_the_url_from_the_environment(pg_url: str) -> None:
    """$HERMES_STORE_URL names the server store for every command."""
    with SessionEngine.open(pg_url, actor="test") as eng:
        eng.start_session("cli", title="from env", cwd="")
    result = CliRunner().invoke(
        cli,
        ["sessions", "list", "--json"],
        env={"HERMES_HOME": "/nonexistent", STORE_URL_ENV: pg_url},
    )
    assert result.exit_code == 0, result.output
    assert [r["title"] for r in json.loads(result.output)] == ["from env"]


def test_cli_takes_the_url_from_config_yaml(pg_url: str, tmp_path: Path) -> None:
    """``store: {url: postgresql://…}`` in the profile's config.yaml names the server store for
    reads and writes (no state.db appears); ``$HERMES_STORE_URL`` and ``--store`` beat it."""
    (tmp_path / "config.yaml").write_text(f"store:\n  url: '{pg_url}'\n")
    env = {"HERMES_HOME": str(tmp_path)}
    runner = CliRunner()
    result = runner.invoke(cli, ["-q", "configured", "--model", "offline"], env=env)
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["sessions", "search", "configured", "--json"], env=env)
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.output)) == 1
    assert not (tmp_path / "state.db").exists()
    with SessionEngine.open(pg_url) as eng:
        assert ("user", 0) in [(h.role, h.seq) for h in eng.search("configured")]
    elsewhere = str(tmp_path / "elsewhere.db")
    for extra_env, option in (({STORE_URL_ENV: elsewhere}, []), ({}, ["--store", elsewhere])):
        result = runner.invoke(cli, [*option, "sessions", "list"], env={**env, **extra_env})
        assert (result.exit_code, result.output) == (0, "no sessions\n")


def test_cli_empty_database_is_no_sessions_yet(pg_url: str) -> None:
    """A database without a hermes store: ``stats`` is "no sessions yet" (exit 1), ``list``
    lists no sessions (exit 0, as on a fresh HERMES_HOME), and the database stays empty."""
    code, out = _run(pg_url, "sessions", "stats")
    assert code == 1
    assert "no sessions yet" in out
    assert _run(pg_url, "sessions", "list") == (0, "no sessions\n")
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('events')").fetchone() == (None,)


def test_unreachable_server_is_a_clean_error() -> None:
    """A server that does not answer is exit 1 naming the store (password hidden), no traceback."""
    code, out = _run("postgresql://bob:hunter2@127.0.0.1:1/x", "sessions", "list")
    assert code == 1
    assert "could not reach the store at postgresql://bob:***@127.0.0.1:1/x" in out
    assert "hunter2" not in out
    assert "Traceback" not in out


def test_unreachable_server_on_the_python_api() -> None:
    """``SessionEngine.open`` on a dead server raises StoreError naming the store."""
    with pytest.raises(StoreError, match=r"127\.0\.0\.1:1"):
        SessionEngine.open("postgresql://postgres@127.0.0.1:1/x")


def test_curation_chat_and_prune_on_postgres(pg_url: str, tmp_path: Path) -> None:
    """rename, pin, archive, a one-shot chat and a dry-run prune work on a server store, and
    no state.db appears in the profile."""
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", title="t1", cwd="/w")
        eng.append_message(sid, "user", "hello there")
    env = {"HERMES_HOME": str(tmp_path)}
    runner = CliRunner()
    for args in (
        ["sessions", "rename", sid, "renamed"],
        ["sessions", "pin", sid],
        ["sessions", "archive", sid],
        ["sessions", "unarchive", sid],
        ["-q", "hello", "--model", "offline"],
        ["sessions", "prune", "--older-than", "0d", "--dry-run"],
    ):
        result = runner.invoke(cli, ["--store", pg_url, *args], env=env)
        assert result.exit_code == 0, (args, result.output)
    with SessionEngine.open(pg_url) as eng:
        state = eng.get(sid)
        assert (state.title, state.pinned, state.archived) == ("renamed", True, "")
        assert eng.search("hello", limit=10)
    assert not (tmp_path / "state.db").exists()


def test_optimize_on_postgres_rewrites_the_tables_deletes_touch(
    pg_url: str, tmp_path: Path
) -> None:
    """``sessions optimize`` on a server store runs the delete's table rewrite (VACUUM (FULL))
    and reports the sizes; it creates no state.db."""
    with SessionEngine.open(pg_url) as eng:
        eng.start_session("cli", cwd="")
    env = {"HERMES_HOME": str(tmp_path)}
    result = CliRunner().invoke(cli, ["--store", pg_url, "sessions", "optimize"], env=env)
    assert result.exit_code == 0, result.output
    assert "VACUUM (FULL)" in result.output and "reclaimed" in result.output
    result = CliRunner().invoke(cli, ["--store", pg_url, "sessions", "optimize", "--json"], env=env)
    assert result.exit_code == 0, result.output
    sizes = json.loads(result.output)
    assert sizes["bytes_after"] > 0 and sizes["vacuum_seconds"] >= 0
    assert not (tmp_path / "state.db").exists()


def test_doctor_on_postgres(pg_url: str, tmp_path: Path) -> None:
    """doctor names the server store; with --full it verifies the projections and reports a
    drifted table as an error (exit 1)."""
    env = {"HERMES_HOME": str(tmp_path)}
    result = CliRunner().invoke(cli, ["--store", pg_url, "doctor", "--json"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["findings"][0]["level"] == "info"
    with SessionEngine.open(pg_url) as eng:
        sid = eng.start_session("cli", cwd="")
        eng.append_message(sid, "user", "x")
    result = CliRunner().invoke(cli, ["--store", pg_url, "doctor", "--full"], env=env)
    assert result.exit_code == 0, result.output
    assert "match the log" in result.output
    with psycopg.connect(pg_url) as conn:
        conn.execute("UPDATE sessions SET title = 'tampered'")
    result = CliRunner().invoke(cli, ["--store", pg_url, "doctor", "--full", "--json"], env=env)
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["ok"] is False
    projections = [f for f in report["findings"] if f["check"] == "projections"]
    assert "sessions" in projections[0]["message"]


def test_concurrent_first_opens_create_one_store(pg_url: str) -> None:
    """Three processes opening a fresh database at once all succeed (one creates the store)."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from hermes_es.commands.engine import SessionEngine\n"
        "with SessionEngine.open(sys.argv[1]) as eng:\n"
        "    eng.start_session('cli', cwd='')\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, pg_url], stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    with SessionEngine.open(pg_url) as eng:
        assert eng.store.connection().execute("SELECT COUNT(*) FROM sessions").fetchall() == [(3,)]


def test_other_layout_is_replayed_from_the_log(pg_url: str) -> None:
    """A store whose recorded projection layout differs gets its projections dropped and
    replayed from the log when opened: the sessions and their search come back."""
    with SessionEngine.open(pg_url) as eng:
        sid = eng.start_session("cli", cwd="", title="kept")
        eng.append_message(sid, "user", "findable words")
    with psycopg.connect(pg_url) as conn:
        conn.execute("UPDATE hermes_meta SET value = 'old' WHERE key = 'schema_version'")
        conn.execute("DELETE FROM messages")  # drift the old layout leaves is replaced
    with SessionEngine.open(pg_url) as eng:
        assert eng.get(sid).title == "kept"
        assert [h.session_id for h in eng.search("findable")] == [sid]
        assert [d.table for d in eng.backend.verify() if not d.equal] == []


def test_unknown_turn_is_shown_and_resolved_on_postgres(pg_url: str, tmp_path: Path) -> None:
    """A turn a crash left unknown on a server store: ``list`` and ``show`` say so and
    ``sessions resolve --discard`` (no gateway running) records the resolution there, with no
    state.db appearing in the profile."""
    from hermes_es.commands import turns

    with SessionEngine.open(pg_url, actor="uid:0") as eng:
        sid = eng.start_session("cli", cwd="")
        turns.admit(eng, sid, submission_id="a", client_kind="cli", text="first")
        turns.admit(eng, sid, submission_id="b", client_kind="cli", text="second")
        turns.start_next(eng, sid, epoch=1)
        turns.recover(eng, epoch=2)
    env = {"HERMES_HOME": str(tmp_path)}
    runner = CliRunner()
    listed = runner.invoke(cli, ["--store", pg_url, "sessions", "list"], env=env)
    assert listed.exit_code == 0, listed.output
    assert f"{sid} [unknown turn]" in listed.output
    shown = runner.invoke(cli, ["--store", pg_url, "sessions", "show", sid], env=env)
    assert f"hermes sessions resolve {sid} --discard" in shown.output
    result = runner.invoke(
        cli, ["--store", pg_url, "sessions", "resolve", sid, "--discard"], env=env
    )
    assert (result.exit_code, result.output.strip()) == (0, f"{sid}: turn 1 discarded")
    with SessionEngine.open(pg_url) as eng:
        state = eng.get(sid)
        assert state.turn_state == "queued" and state.turn_queue == [2]
    assert not (tmp_path / "state.db").exists()
