"""Choosing the store: --store, $HERMES_STORE_URL, config.yaml store.url, else state.db."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_es.cli.app import cli
from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import ConfigError
from hermes_es.store.backend import (
    STORE_URL_ENV,
    SqliteBackend,
    configured_url,
    open_backend,
    redact_url,
    resolve_target,
)


def test_default_is_the_profiles_state_db(tmp_path: Path) -> None:
    """With no option, variable or config entry the store is the profile's state.db."""
    db = tmp_path / "state.db"
    assert resolve_target(db, tmp_path / "config.yaml", environ={}) == db


def test_option_beats_environment_beats_config(tmp_path: Path) -> None:
    """--store wins over $HERMES_STORE_URL, which wins over config.yaml's store.url."""
    config = tmp_path / "config.yaml"
    config.write_text("store:\n  url: /from/config.db\n")
    env = {STORE_URL_ENV: "/from/env.db"}
    db = tmp_path / "state.db"
    assert resolve_target(db, config, option="/from/option.db", environ=env) == "/from/option.db"
    assert resolve_target(db, config, environ=env) == "/from/env.db"
    assert resolve_target(db, config, environ={}) == "/from/config.db"


def test_config_without_a_store_entry_is_not_parsed(tmp_path: Path) -> None:
    """A config.yaml that names no store leaves the default (and is not even parsed)."""
    config = tmp_path / "config.yaml"
    config.write_text("model: [unparsed: {\n")  # invalid YAML: parsing it would raise
    assert configured_url(config) is None


def test_bad_store_entry_in_config_is_a_config_error(tmp_path: Path) -> None:
    """``store.url`` must be a string: anything else is a ConfigError naming the file."""
    config = tmp_path / "config.yaml"
    config.write_text("store:\n  url: [1, 2]\n")
    with pytest.raises(ConfigError, match=r"config\.yaml"):
        configured_url(config)


def test_unsupported_scheme_is_refused() -> None:
    """A URL of an unknown scheme is refused with a message naming the scheme."""
    with pytest.raises(ConfigError, match="unsupported scheme 'mysql'"):
        open_backend("mysql://root:secret@db/x")


def test_redact_url_hides_the_password() -> None:
    """Printed URLs never carry the password."""
    assert redact_url("postgresql://bob:s3cret@db:5432/h") == "postgresql://bob:***@db:5432/h"
    assert redact_url("postgresql://bob@db/h") == "postgresql://bob@db/h"


def test_path_target_is_a_sqlite_backend(tmp_path: Path) -> None:
    """A plain path opens the SQLite backend on that file."""
    backend = open_backend(str(tmp_path / "x.db"))
    assert isinstance(backend, SqliteBackend)
    assert backend.path == tmp_path / "x.db"
    assert not backend.exists()


def _seed(db: Path, title: str) -> str:
    with SessionEngine.open(db, actor="test") as eng:
        sid = eng.start_session("cli", title=title, cwd="/w")
        eng.append_message(sid, "user", f"hello from {title}")
    return sid


def test_cli_store_option_and_variable_pick_the_store(tmp_path: Path) -> None:
    """``--store PATH`` and $HERMES_STORE_URL make every command use that store."""
    home = tmp_path / "home"
    home.mkdir()
    other = tmp_path / "elsewhere.db"
    sid = _seed(other, "far away")
    _seed(home / "state.db", "at home")
    runner = CliRunner()
    env = {"HERMES_HOME": str(home)}
    result = runner.invoke(cli, ["--store", str(other), "sessions", "list", "--json"], env=env)
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in json.loads(result.output)] == [sid]
    result = runner.invoke(
        cli, ["sessions", "list", "--json"], env={**env, STORE_URL_ENV: str(other)}
    )
    assert [r["title"] for r in json.loads(result.output)] == ["far away"]
    result = runner.invoke(cli, ["sessions", "list", "--json"], env=env)
    assert [r["title"] for r in json.loads(result.output)] == ["at home"]


def test_cli_config_store_url_picks_the_store(tmp_path: Path) -> None:
    """``store: {url: …}`` in the profile's config.yaml chooses the store."""
    home = tmp_path / "home"
    home.mkdir()
    other = tmp_path / "cfg.db"
    _seed(other, "configured")
    (home / "config.yaml").write_text(f"store:\n  url: {other}\n")
    result = CliRunner().invoke(
        cli, ["sessions", "search", "hello", "--json"], env={"HERMES_HOME": str(home)}
    )
    assert result.exit_code == 0, result.output
    assert "configured" in result.output


def test_cli_bad_store_url_is_a_clean_error(tmp_path: Path) -> None:
    """An unusable --store is exit 1 with ``Error:`` naming the scheme, no traceback."""
    result = CliRunner().invoke(
        cli, ["--store", "ftp://u:pw@h/x", "sessions", "list"], env={"HERMES_HOME": str(tmp_path)}
    )
    assert result.exit_code == 1
    assert "unsupported scheme 'ftp'" in result.output
    assert "pw" not in result.output
    assert "Traceback" not in result.output


def test_cli_missing_store_is_no_sessions_yet(tmp_path: Path) -> None:
    """Read commands on a store that does not exist create nothing: ``stats`` says so (exit
    1), ``list`` simply lists no sessions (exit 0, as on a fresh HERMES_HOME)."""
    target = tmp_path / "none.db"
    env = {"HERMES_HOME": str(tmp_path)}
    result = CliRunner().invoke(cli, ["--store", str(target), "sessions", "stats"], env=env)
    assert result.exit_code == 1
    assert "no sessions yet" in result.output
    listed = CliRunner().invoke(cli, ["--store", str(target), "sessions", "list"], env=env)
    assert (listed.exit_code, listed.output) == (0, "no sessions\n")
    assert not target.exists()


def test_sqlite_read_path_imports_no_server_or_eventsourcing_code(tmp_path: Path) -> None:
    """``sessions list`` on SQLite never imports eventsourcing, psycopg or the PG backend."""
    import subprocess
    import sys

    home = tmp_path / "home"
    home.mkdir()
    _seed(home / "state.db", "fast start")
    script = (
        "import sys\n"
        "from hermes_es.cli.app import cli\n"
        "try:\n"
        "    cli(['sessions', 'list', '--json'], standalone_mode=False)\n"
        "finally:\n"
        "    loaded = [m for m in sys.modules if m.split('.')[0] in ('eventsourcing', 'psycopg',"
        " 'psycopg_pool') or m.startswith('hermes_es.store.postgres')]\n"
        "    print('LOADED', loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={"HERMES_HOME": str(home), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "fast start" in out
    assert "LOADED []" in out
