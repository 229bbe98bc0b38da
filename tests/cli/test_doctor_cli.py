"""Tests for ``hermes doctor`` and for sessions never resetting on their own."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import apsw
import pytest
from click.testing import CliRunner, Result

from hermes_es.cli.app import cli
from hermes_es.commands import doctor as doctor_mod
from hermes_es.commands.engine import SessionEngine
from hermes_es.config import RESET_PLUGIN, load_config
from hermes_es.projections.catalog import connect, set_position
from hermes_es.queries.resolve import latest_session

DAY = 86_400.0


def run(home: Path, *args: str, env: Mapping[str, str] | None = None) -> Result:
    """Invoke the hermes CLI in-process with HERMES_HOME=home (and extra environment)."""
    return CliRunner().invoke(cli, list(args), env={"HERMES_HOME": str(home), **(env or {})})


def findings(home: Path, *args: str, env: Mapping[str, str] | None = None) -> list[Any]:
    """The doctor's JSON findings."""
    result = run(home, "doctor", "--json", *args, env=env)
    data: dict[str, Any] = json.loads(result.output)
    out: list[Any] = data["findings"]
    return out


def levels(rows: list[Any], check: str) -> list[str]:
    """The levels of every finding of one check."""
    return [row["level"] for row in rows if row["check"] == check]


def make_store(home: Path) -> str:
    """A store with one session holding a couple of messages."""
    with SessionEngine.open(home) as eng:
        sid = eng.start_session("cli", cwd=str(home))
        eng.append_message(sid, "user", "hello zebra")
        eng.append_message(sid, "assistant", "hi there")
        return sid


def write_config(home: Path, text: str) -> None:
    """Write the default profile's config.yaml."""
    (home / "config.yaml").write_text(text)


def test_healthy_store_exits_zero(tmp_path: Path) -> None:
    """A sound store and no config report every check ok and exit 0."""
    make_store(tmp_path)
    result = run(tmp_path, "doctor")
    assert result.exit_code == 0, result.output
    assert "everything looks healthy" in result.output
    rows = findings(tmp_path)
    for check in ("store.integrity", "store.projections", "store.fts", "store.wal"):
        assert levels(rows, check) == ["ok"], check


def test_missing_store_is_not_a_problem(tmp_path: Path) -> None:
    """Without a state.db the doctor says so, creates nothing, and exits 0."""
    result = run(tmp_path, "doctor")
    assert result.exit_code == 0
    assert "no store yet" in result.output
    assert not (tmp_path / "state.db").exists()


def test_full_runs_integrity_check_and_verify(tmp_path: Path) -> None:
    """--full runs SQLite integrity_check and a replay comparison of every table."""
    make_store(tmp_path)
    rows = findings(tmp_path, "--full")
    assert levels(rows, "store.verify") == ["ok"]
    assert any("integrity_check: ok" in row["message"] for row in rows)


def test_projections_behind_the_log_is_an_error(tmp_path: Path) -> None:
    """Projections that have not applied the newest events fail, pointing at rebuild."""
    make_store(tmp_path)
    conn = connect(tmp_path / "state.db")
    with conn:
        set_position(conn, 1)
    conn.close()
    result = run(tmp_path, "doctor")
    assert result.exit_code == 1
    assert "FAIL" in result.output and "rebuild-projections" in result.output
    assert run(tmp_path, "sessions", "rebuild-projections", "--quiet").exit_code == 0
    assert run(tmp_path, "doctor").exit_code == 0


def test_diverged_projection_fails_full_check(tmp_path: Path) -> None:
    """A projection row edited behind the log's back is caught by --full."""
    sid = make_store(tmp_path)
    conn = connect(tmp_path / "state.db")
    with conn:
        conn.execute("UPDATE sessions SET title = 'tampered' WHERE id = ?", (sid,))
    conn.close()
    assert run(tmp_path, "doctor").exit_code == 0
    result = run(tmp_path, "doctor", "--full", "--json")
    assert result.exit_code == 1
    assert levels(json.loads(result.output)["findings"], "store.verify") == ["error"]


def test_search_index_out_of_step_is_an_error(tmp_path: Path) -> None:
    """A message whose index entries are gone (its row stays) fails the FTS integrity-check."""
    make_store(tmp_path)
    conn = connect(tmp_path / "state.db")
    with conn:
        conn.execute(
            "INSERT INTO messages_fts(messages_fts, rowid, content)"
            " SELECT 'delete', id, content FROM messages ORDER BY id LIMIT 1"
        )
    conn.close()
    result = run(tmp_path, "doctor", "--json")
    assert result.exit_code == 1
    assert levels(json.loads(result.output)["findings"], "store.fts") == ["error"]


def test_damaged_file_exits_one(tmp_path: Path) -> None:
    """A state.db with overwritten pages is reported as a failure, not a traceback."""
    make_store(tmp_path)
    db = tmp_path / "state.db"
    data = bytearray(db.read_bytes())
    page = 4096
    for start in range(2 * page, len(data), page):
        data[start + 8 : start + 64] = b"\xff" * 56
    db.write_bytes(bytes(data))
    result = run(tmp_path, "doctor")
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_index_damage_fails_full_integrity_check(tmp_path: Path) -> None:
    """An index that no longer matches its table fails integrity_check under --full."""
    make_store(tmp_path)
    conn = apsw.Connection(str(tmp_path / "state.db"))
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = 'CREATE INDEX sessions_root ON sessions (title)'"
        " WHERE name = 'sessions_root'"
    )
    conn.close()
    result = run(tmp_path, "doctor", "--full", "--json")
    assert result.exit_code == 1
    integrity = [
        r for r in json.loads(result.output)["findings"] if r["check"] == "store.integrity"
    ]
    assert integrity[0]["level"] == "error"
    assert "missing from index sessions_root" in integrity[0]["message"]
    assert "REINDEX" in integrity[0]["fix"]


def test_large_wal_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write-ahead log above the limit is a warning while a process keeps the store open."""
    monkeypatch.setattr(doctor_mod, "WAL_WARN_BYTES", 1)
    make_store(tmp_path)
    with SessionEngine.open(tmp_path) as eng:
        eng.start_session("cli", cwd=str(tmp_path))
        assert (tmp_path / "state.db-wal").stat().st_size > 1
        rows = findings(tmp_path)
    assert levels(rows, "store.wal") == ["warning"]


def test_live_holders_are_listed(tmp_path: Path) -> None:
    """A registered holder of state.db is named in the report."""
    holders = pytest.importorskip("hermes_es.commands.holders")
    make_store(tmp_path)
    with holders.register_holder(tmp_path / "state.db", "chat", "abc"):
        rows = findings(tmp_path)
    held = [row for row in rows if row["check"] == "store.holders"]
    assert held[0]["level"] == "info"
    assert "(chat, session abc)" in held[0]["message"]


def test_repair_candidates_are_a_warning(tmp_path: Path) -> None:
    """A degraded stored prompt is a warning that points at repair-prompts --apply."""
    with SessionEngine.open(tmp_path) as eng:
        eng.start_session(
            "cli", cwd=str(tmp_path), system_prompt="degraded\n", tools=["skill_manage"]
        )
    rows = findings(tmp_path)
    prompt = next(row for row in rows if row["check"] == "store.prompts")
    assert prompt["level"] == "warning"
    assert "repair-prompts" in prompt["fix"]


LEGACY_CONFIGS = {
    "mode idle": "session_reset:\n  mode: idle\n",
    "mode daily": "session_reset:\n  mode: daily\n  at_hour: 4\n",
    "mode both": "session_reset:\n  mode: both\n  idle_minutes: 30\n",
    "shorthand": "session_reset: daily\n",
    "platform override": "session_reset:\n  mode: none\n  telegram:\n    mode: idle\n",
    "reset_policy": "session_reset:\n  mode: none\nreset_policy:\n  mode: daily\n",
}


@pytest.mark.parametrize("name", sorted(LEGACY_CONFIGS))
def test_each_legacy_config_form_warns_and_names_the_plugin(tmp_path: Path, name: str) -> None:
    """Every legacy session-reset form is a warning naming the reset-policy plugin; exit 0."""
    write_config(tmp_path, LEGACY_CONFIGS[name])
    result = run(tmp_path, "doctor", "--json")
    assert result.exit_code == 0, result.output
    legacy = [row for row in json.loads(result.output)["findings"] if "legacy" in row["check"]]
    assert legacy and all(row["level"] == "warning" for row in legacy)
    assert all("never reset on their own" in row["message"] for row in legacy)
    assert all(RESET_PLUGIN in row["message"] for row in legacy)
    assert run(tmp_path, "doctor", "--strict").exit_code == 1


@pytest.mark.parametrize(
    "variable", ["HERMES_SESSION_RESET_MODE", "SESSION_RESET_IDLE_MINUTES", "HERMES_RESET_AT_HOUR"]
)
def test_reset_timer_environment_variables_warn(tmp_path: Path, variable: str) -> None:
    """A reset-timer environment variable is a warning naming it and the plugin."""
    rows = findings(tmp_path, env={variable: "30"})
    legacy = [row for row in rows if row["check"] == "config.legacy_reset"]
    assert len(legacy) == 1
    assert variable in legacy[0]["message"] and RESET_PLUGIN in legacy[0]["message"]


def test_reset_mode_none_is_quiet(tmp_path: Path) -> None:
    """session_reset.mode: none with no overrides produces no legacy warning."""
    write_config(tmp_path, "session_reset:\n  mode: none\n")
    assert levels(findings(tmp_path), "config.legacy_reset") == []


def test_unknown_config_key_is_a_warning(tmp_path: Path) -> None:
    """An unknown key is reported with its dotted path and the run still exits 0."""
    write_config(tmp_path, "sessions:\n  max_exprot_messages: 5\n")
    result = run(tmp_path, "doctor")
    assert result.exit_code == 0
    assert "unknown key 'sessions.max_exprot_messages'" in result.output
    assert "no problems; 1 warning(s)" in result.output


def test_invalid_config_is_an_error(tmp_path: Path) -> None:
    """A config value of the wrong type fails with the location and exit 1."""
    write_config(tmp_path, "max_turns: lots\n")
    result = run(tmp_path, "doctor", "--json")
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["ok"] is False and data["errors"] == 1
    load = next(row for row in data["findings"] if row["check"] == "config.load")
    assert "max_turns" in load["message"]
    assert "refuse to run until it is fixed" in load["fix"]
    assert "defaults" not in load["fix"]


def test_invalid_config_fix_matches_what_chat_does(tmp_path: Path) -> None:
    """Doctor says config readers refuse to run, and chat does refuse with the same problem."""
    write_config(tmp_path, "max_turns: lots\n")
    report = run(tmp_path, "doctor")
    assert report.exit_code == 1
    assert "commands that read the config" in report.output
    assert "uses its defaults" not in report.output
    chat = run(tmp_path, "chat", "-q", "hello")
    assert chat.exit_code == 1
    assert "Error:" in chat.output and "max_turns" in chat.output


def test_old_gateway_session_is_continued_not_reset(tmp_path: Path) -> None:
    """A gateway session idle for weeks, with reset config present, resolves and continues."""
    write_config(tmp_path, "session_reset:\n  mode: both\n  idle_minutes: 1\n  at_hour: 4\n")
    loaded = load_config(tmp_path / "config.yaml")
    assert any(RESET_PLUGIN in warning for warning in loaded.warnings)
    assert not hasattr(loaded.config, "session_reset")
    now = [1_700_000_000.0]
    with SessionEngine.open(tmp_path, clock=lambda: now[0]) as eng:
        sid = eng.start_session("telegram", platform="telegram", chat_id="42", cwd=str(tmp_path))
        eng.append_message(sid, "user", "before the break")
        now[0] += 45 * DAY
        found = latest_session(eng.store.connection(), sources=["telegram"])
        assert found == sid
        seq = eng.append_message(found, "user", "after the break")
        state = eng.get(sid)
    assert seq == 1
    assert not state.ended and state.message_count == 2
    assert state.last_active == now[0]
