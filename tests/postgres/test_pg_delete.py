"""Physical delete on PostgreSQL: rows, index entries and the bytes in the table files go."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
from click.testing import CliRunner, Result

from hermes_es.cli.app import cli
from hermes_es.commands.delete import delete_session
from hermes_es.commands.engine import SessionEngine
from tests.pg_server import PgServer

SECRET = "zebra-marmalade-4711"
KEPT = "quokka-lighthouse-0815"


def _database_files(server: PgServer, url: str) -> list[Path]:
    """Every file of the test's database (heap, TOAST, indexes, free space maps)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        row = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
        oid = row.fetchone()[0]  # type: ignore[index]
    return sorted((server.data / "base" / str(oid)).iterdir())


def _read(path: Path) -> bytes:
    """A database file's bytes; empty when the server removed it after the listing (it drops
    and rewrites its own cache files, ``pg_internal.init``, whenever it likes): a file that is
    gone holds nothing."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _files_holding(server: PgServer, url: str, text: str | bytes) -> list[str]:
    needle = text.encode() if isinstance(text, str) else text
    return [p.name for p in _database_files(server, url) if needle in _read(p)]


def _payloads(url: str, stream: str) -> list[bytes]:
    """The stored (compressed) payloads of a stream's events, as the table files hold them."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT state FROM events WHERE originator_id = %s", (stream,))
        return [bytes(r[0]) for r in rows.fetchall()]


def _seed(url: str) -> tuple[str, str]:
    with SessionEngine.open(url, actor="test") as eng:
        doomed = eng.start_session("cli", title="to delete", cwd="", system_prompt=f"sys {SECRET}")
        for i in range(20):
            eng.append_message(doomed, "user", f"message {i}: {SECRET} " + "x" * 200)
        kept = eng.start_session("cli", cwd="")
        eng.append_message(kept, "user", f"keep this {KEPT}")
    return doomed, kept


def test_delete_leaves_no_trace_in_the_table_files(pg_server: PgServer, pg_url: str) -> None:
    """After a delete the secret is in no file of the database (checked after a checkpoint),
    while the other session's text still is; rows, index entries and the prompt are gone."""
    doomed, kept = _seed(pg_url)
    assert _files_holding(pg_server, pg_url, SECRET)  # the scan can see text
    # The log keeps payloads compressed, so the secret's text is not in them: scan for the
    # stored bytes of each of the session's events as well.
    payloads = [p for p in _payloads(pg_url, doomed) if len(p) >= 24]
    assert len(payloads) >= 20
    assert all(_files_holding(pg_server, pg_url, p) for p in payloads[:3])  # it sees them too
    with SessionEngine.open(pg_url, actor="test") as eng:
        done = delete_session(eng.store, doomed, actor="test")
        assert [(d.session_id, d.messages, d.scrubbed) for d in done] == [(doomed, 20, True)]
        assert eng.search(SECRET) == []
        assert [h.session_id for h in eng.search(KEPT)] == [kept]
        assert [d.table for d in eng.backend.verify() if not d.equal] == []
    assert _files_holding(pg_server, pg_url, SECRET) == []
    assert _files_holding(pg_server, pg_url, KEPT)
    left = [p for p in payloads if _files_holding(pg_server, pg_url, p)]
    assert left == [], f"{len(left)} of the deleted events' payloads are still in table files"
    with psycopg.connect(pg_url) as conn:
        for table, column in (("events", "originator_id"), ("messages", "session_id")):
            count = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} = %s", (doomed,))
            assert count.fetchone() == (0,)
        assert conn.execute("SELECT COUNT(*) FROM prompts").fetchone() == (0,)
        receipt = conn.execute(
            "SELECT session_id, messages FROM deletions WHERE session_id = %s", (doomed,)
        ).fetchall()
        assert receipt == [(doomed, 20)]


def test_cli_delete_on_postgres(pg_server: PgServer, pg_url: str) -> None:
    """``hermes sessions delete --yes`` on a server store deletes and leaves the receipt."""
    doomed, _ = _seed(pg_url)
    runner = CliRunner()
    env = {"HERMES_HOME": str(pg_server.root / "home")}
    result = runner.invoke(cli, ["--store", pg_url, "sessions", "delete", doomed, "--yes"], env=env)
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        cli, ["--store", pg_url, "sessions", "history", doomed, "--json"], env=env
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)
    assert _files_holding(pg_server, pg_url, SECRET) == []


def test_a_lock_held_elsewhere_leaves_the_scrub_pending(pg_url: str) -> None:
    """When another session holds a table lock, the delete commits and reports scrubbed=False."""
    doomed, _ = _seed(pg_url)
    with psycopg.connect(pg_url) as blocker, SessionEngine.open(pg_url, actor="t") as eng:
        blocker.execute("SELECT COUNT(*) FROM sessions")  # holds ACCESS SHARE until rollback
        done = delete_session(eng.store, doomed, actor="test")
        blocker.rollback()
        assert [d.scrubbed for d in done] == [False]
        assert eng.search(SECRET) == []
        assert eng.store.scrub_after_delete() is True  # type: ignore[attr-defined]


def test_cli_delete_whose_scrub_is_blocked_says_what_finishes_it(
    pg_server: PgServer, pg_url: str
) -> None:
    """``sessions delete`` while another connection holds a table lock: the delete commits
    (exit 0) and the warning is the server store's (the next delete or VACUUM (FULL) finishes
    it), not state.db's; the next delete then leaves no trace of the first in the files."""
    doomed, kept = _seed(pg_url)
    env = {"HERMES_HOME": str(pg_server.root / "home")}
    with psycopg.connect(pg_url) as blocker:
        blocker.execute("SELECT COUNT(*) FROM sessions")  # holds ACCESS SHARE until rollback
        result = CliRunner().invoke(
            cli, ["--store", pg_url, "sessions", "delete", doomed, "--yes"], env=env
        )
        blocker.rollback()
    assert result.exit_code == 0, result.output
    assert f"deleted {doomed}" in result.output
    assert "another connection to the database held a lock" in result.output
    assert "VACUUM (FULL)" in result.output and "state.db" not in result.output
    assert _files_holding(pg_server, pg_url, SECRET)  # the scrub did not run
    result = CliRunner().invoke(
        cli, ["--store", pg_url, "sessions", "delete", kept, "--yes"], env=env
    )
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
    assert _files_holding(pg_server, pg_url, SECRET) == []


def test_a_blocked_scrub_is_recorded_reported_by_doctor_and_finished_by_optimize(
    pg_server: PgServer, pg_url: str
) -> None:
    """A delete whose rewrite was blocked leaves a pending record (a time, no content):
    ``doctor`` warns (exit 1 with --strict), ``optimize`` refuses while the lock is still held
    and changes nothing, then finishes it; afterwards doctor is clean and the text is gone."""
    doomed, _ = _seed(pg_url)
    env = {"HERMES_HOME": str(pg_server.root / "home")}

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli, ["--store", pg_url, *args], env=env)

    with psycopg.connect(pg_url) as blocker:
        blocker.execute("SELECT COUNT(*) FROM sessions")  # holds ACCESS SHARE until rollback
        assert invoke("sessions", "delete", doomed, "--yes").exit_code == 0
        busy = invoke("sessions", "optimize")
        blocker.rollback()
    assert busy.exit_code == 1, busy.output
    assert "held a lock" in busy.output and "Traceback" not in busy.output
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT value FROM hermes_meta WHERE key = 'scrub_pending'")
        record = json.loads(row.fetchone()[0])  # type: ignore[index]
    assert record["reason"] == "delete" and record["since"] > 0
    assert SECRET not in json.dumps(record)
    report = invoke("doctor", "--json")
    assert report.exit_code == 0, report.output
    scrub = [f for f in json.loads(report.output)["findings"] if f["check"] == "store.scrub"]
    assert [f["level"] for f in scrub] == ["warning"]
    assert "hermes sessions optimize" in scrub[0]["message"]
    assert invoke("doctor", "--strict").exit_code == 1
    assert _files_holding(pg_server, pg_url, SECRET)  # still in the files

    done = invoke("sessions", "optimize")
    assert done.exit_code == 0, done.output
    assert _files_holding(pg_server, pg_url, SECRET) == []
    report = invoke("doctor", "--strict", "--json")
    assert report.exit_code == 0, report.output
    scrub = [f for f in json.loads(report.output)["findings"] if f["check"] == "store.scrub"]
    assert [f["level"] for f in scrub] == ["ok"]
