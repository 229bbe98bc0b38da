"""Store URL parameters reach the server's connections; ``sessions stats`` reports real sizes."""

from __future__ import annotations

import json

import psycopg
import pytest
from click.testing import CliRunner

from hermes_es.cli.app import cli
from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import ConfigError, StoreError
from hermes_es.store.postgres.store import datastore_for


def _names_seen(pg_url: str, url: str) -> list[str]:
    """application_name of every connection the engine at ``url`` holds while it writes."""
    with SessionEngine.open(url, actor="t") as eng:
        eng.start_session("cli", cwd="")
        dbname = pg_url.rsplit("/", 1)[1]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = %s"
                " AND pid <> pg_backend_pid()",
                (dbname,),
            ).fetchall()
    return sorted({str(r[0]) for r in rows})


def test_url_parameters_reach_the_connections(pg_url: str) -> None:
    """``?application_name=…&sslmode=disable&connect_timeout=3`` are passed to libpq: the
    server shows the engine's connections under that name."""
    url = pg_url + "?application_name=team-box-7&sslmode=disable&connect_timeout=3"
    assert _names_seen(pg_url, url) == ["team-box-7"]


def test_connections_are_named_hermes_by_default(pg_url: str) -> None:
    """Without ``application_name`` in the URL the server sees the connections as ``hermes``."""
    assert _names_seen(pg_url, pg_url) == ["hermes"]


def test_sslmode_require_is_enforced(pg_url: str) -> None:
    """``sslmode=require`` against a server without SSL fails to connect, naming the store
    (the option is applied, not dropped)."""
    with pytest.raises(StoreError, match="could not reach the store"):
        SessionEngine.open(pg_url + "?sslmode=require&connect_timeout=2", actor="t")


@pytest.mark.parametrize("value", ["soon", "0", "-4"])
def test_bad_connect_timeout_is_refused(value: str) -> None:
    """A ``connect_timeout`` that is not a positive number is a ConfigError naming it."""
    with pytest.raises(ConfigError, match="connect_timeout"):
        datastore_for(f"postgresql://u@127.0.0.1:1/db?connect_timeout={value}")


def test_stats_reports_relation_sizes(pg_url: str) -> None:
    """``sessions stats --json`` on a server store reports its tables' total size from
    ``pg_total_relation_size`` (more than the log and messages alone, growing as messages are
    stored), not 0 and not a local file's size."""

    def stats() -> dict[str, int]:
        result = CliRunner().invoke(
            cli,
            ["--store", pg_url, "sessions", "stats", "--json"],
            env={"HERMES_HOME": "/nonexistent"},
        )
        assert result.exit_code == 0, result.output
        return dict(json.loads(result.output))

    with SessionEngine.open(pg_url, actor="t") as eng:
        sid = eng.start_session("cli", cwd="")
        before = stats()
        for i in range(200):
            eng.append_message(sid, "user", f"message {i} " + "lorem ipsum dolor " * 40)
    after = stats()
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT SUM(pg_total_relation_size(c.oid)),"
            " SUM(pg_total_relation_size(c.oid)) FILTER"
            " (WHERE c.relname IN ('events', 'messages', 'messages_fts'))"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind = 'r'"
        ).fetchone()
    assert row is not None
    every_table, log_and_messages = int(row[0]), int(row[1])
    assert 0 < before["db_bytes"] < after["db_bytes"]
    assert log_and_messages < after["db_bytes"] <= every_table
    assert after["wal_bytes"] == 0
    plain = CliRunner().invoke(
        cli, ["--store", pg_url, "sessions", "stats"], env={"HERMES_HOME": "/nonexistent"}
    )
    assert "database       0 B" not in plain.output
    assert "(tables, indexes and TOAST)" in plain.output
