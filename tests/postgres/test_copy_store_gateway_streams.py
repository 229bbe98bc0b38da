"""``copy-store`` of a store a gateway ran on: its ``gateway:`` streams (epochs, create claims)
are copied as the streams of no session."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from hermes_es.cli.app import cli
from hermes_es.commands import turns
from hermes_es.commands.copy_store import log_digest
from hermes_es.commands.create_claims import claim_of
from hermes_es.commands.engine import SessionEngine


def test_gateway_streams_copy_to_postgres_and_back_and_verify(tmp_path: Path, pg_url: str) -> None:
    """A store holding two gateway epochs and a session made with a create id is copied to
    PostgreSQL and back: each target verifies, lists only the session (no row for a
    ``gateway:`` stream), keeps the claim, and has the source's event digest."""
    source = tmp_path / "source.db"
    with SessionEngine.open(source, actor="test") as eng:
        turns.begin_epoch(eng, "default", instance_id="i1", pid=1)
        sid = eng.start_session("cli", create_id="c1", cwd=str(tmp_path))
        eng.append_message(sid, "user", "copied with its claim")
        turns.begin_epoch(eng, "default", instance_id="i2", pid=2)
        digest = log_digest(eng.store.connection())
    back = tmp_path / "back.db"
    for src, dst in ((str(source), pg_url), (pg_url, str(back))):
        result = CliRunner().invoke(cli, ["sessions", "copy-store", src, dst, "--verify"])
        assert result.exit_code == 0, result.output
        assert "target verified" in result.output
    for target in (pg_url, back):
        with SessionEngine.open(target) as eng:
            conn = eng.store.connection()
            assert [str(r[0]) for r in conn.execute("SELECT id FROM sessions")] == [sid]
            assert claim_of(conn, "c1") == (sid, "test")
            assert log_digest(conn) == digest


def test_gateway_streams_bulk_copy_verifies(tmp_path: Path, pg_url: str) -> None:
    """``copy-store --bulk`` into an empty PostgreSQL database: the epochs and the create claim
    are copied, the target verifies and lists only the session."""
    source = tmp_path / "source.db"
    with SessionEngine.open(source, actor="test") as eng:
        turns.begin_epoch(eng, "default", instance_id="i1", pid=1)
        sid = eng.start_session("cli", create_id="c1", cwd=str(tmp_path))
        eng.append_message(sid, "user", "bulk copied with its claim")
        digest = log_digest(eng.store.connection())
    result = CliRunner().invoke(
        cli, ["sessions", "copy-store", str(source), pg_url, "--bulk", "--verify"]
    )
    assert result.exit_code == 0, result.output
    assert "target verified" in result.output
    with SessionEngine.open(pg_url) as eng:
        conn = eng.store.connection()
        assert [str(r[0]) for r in conn.execute("SELECT id FROM sessions")] == [sid]
        assert claim_of(conn, "c1") == (sid, "test")
        assert log_digest(conn) == digest
