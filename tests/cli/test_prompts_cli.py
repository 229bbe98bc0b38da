"""Tests for ``hermes sessions refresh-prompts`` and ``hermes sessions repair-prompts``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hermes_es.cli.app import cli
from hermes_es.commands.engine import SessionEngine
from hermes_es.prompts.sources import SKILL_SAFETY_HEADING
from hermes_es.queries.prompts import prompt_rows

FULL = ["memory", "skill_manage", "terminal"]
DEGRADED = "You are Hermes.\n\n## Memory\n\nfacts\n\n## Tools\n\nmemory\n"
HEALTHY = f"You are Hermes.\n\n{SKILL_SAFETY_HEADING}\n\nguidance\n"


def run(home: Path, *args: str) -> Result:
    """Invoke the hermes CLI in-process with HERMES_HOME=home."""
    return CliRunner().invoke(cli, list(args), env={"HERMES_HOME": str(home)})


def make_sessions(home: Path, profile: str | None = None) -> dict[str, str]:
    """A candidate, a memory-only, a no-pin, a healthy and a prompt-less session."""
    with SessionEngine.open(home, profile=profile) as eng:
        return {
            "candidate": eng.start_session(
                "cli", cwd=str(home), system_prompt=DEGRADED, tools=FULL
            ),
            "memory_only": eng.start_session(
                "cli", cwd=str(home), system_prompt=DEGRADED, tools=["memory"]
            ),
            "no_pin": eng.start_session("cli", cwd=str(home), system_prompt=DEGRADED),
            "healthy": eng.start_session("cli", cwd=str(home), system_prompt=HEALTHY, tools=FULL),
            "no_prompt": eng.start_session("cli", cwd=str(home), tools=FULL),
        }


def pending(home: Path, profile: str | None = None) -> set[str]:
    """Ids of sessions with a refresh request pending."""
    with SessionEngine.open(home, profile=profile) as eng:
        return {
            row.session_id for row in prompt_rows(eng.store.connection()) if row.refresh_pending
        }


def stored(home: Path, sid: str) -> str | None:
    """A session's stored prompt text."""
    with SessionEngine.open(home) as eng:
        return eng.stored_prompt(sid)


def test_refresh_all_prints_how_many_hold_a_prompt(tmp_path: Path) -> None:
    """refresh-prompts requests a refresh on every session holding a prompt and says how many."""
    ids = make_sessions(tmp_path)
    result = run(tmp_path, "sessions", "refresh-prompts")
    assert result.exit_code == 0, result.output
    assert "4 sessions hold a stored prompt" in result.output
    assert pending(tmp_path) == set(ids.values()) - {ids["no_prompt"]}


def test_refresh_one_session_by_prefix(tmp_path: Path) -> None:
    """--session with a unique prefix refreshes exactly that session."""
    ids = make_sessions(tmp_path)
    result = run(tmp_path, "sessions", "refresh-prompts", "--session", ids["healthy"][:-1])
    assert result.exit_code == 0, result.output
    assert "1 session holds a stored prompt" in result.output
    assert pending(tmp_path) == {ids["healthy"]}


def test_refresh_without_store_says_nothing_to_refresh(tmp_path: Path) -> None:
    """With no state.db yet the command reports zero and creates nothing."""
    result = run(tmp_path, "sessions", "refresh-prompts")
    assert result.exit_code == 0
    assert "0 sessions hold a stored prompt" in result.output
    assert not (tmp_path / "state.db").exists()


def test_refresh_unknown_session_fails_cleanly(tmp_path: Path) -> None:
    """An unknown --session exits 1 with an Error line and no traceback."""
    make_sessions(tmp_path)
    result = run(tmp_path, "sessions", "refresh-prompts", "--session", "zzz")
    assert result.exit_code == 1
    assert "Error: no session matches 'zzz'" in result.output
    assert pending(tmp_path) == set()


def test_subcommand_profile_wins_over_root_profile(tmp_path: Path) -> None:
    """-p on refresh-prompts selects the profile even when the root -p names another."""
    default_ids = make_sessions(tmp_path)
    work_ids = make_sessions(tmp_path, "work")
    result = run(tmp_path, "-p", "default", "sessions", "refresh-prompts", "-p", "work")
    assert result.exit_code == 0, result.output
    assert pending(tmp_path, "work") == set(work_ids.values()) - {work_ids["no_prompt"]}
    assert pending(tmp_path) == set()
    root_only = run(tmp_path, "-p", "default", "sessions", "refresh-prompts", "--json")
    assert json.loads(root_only.output)["holding"] == 4
    assert pending(tmp_path) == set(default_ids.values()) - {default_ids["no_prompt"]}


def test_repair_dry_run_reports_classes_and_changes_nothing(tmp_path: Path) -> None:
    """Without --apply the scan lists the candidate and the unverifiable rows, clearing none."""
    ids = make_sessions(tmp_path)
    result = run(tmp_path, "sessions", "repair-prompts")
    assert result.exit_code == 0, result.output
    assert f"{ids['candidate']}: candidate, would clear" in result.output
    assert f"{ids['memory_only']}: unverifiable_memory_only, unchanged" in result.output
    assert f"{ids['no_pin']}: unverifiable_no_pin, unchanged" in result.output
    assert ids["healthy"] not in result.output
    assert "dry run: 1 stored prompt(s) would be cleared; rerun with --apply" in result.output
    assert stored(tmp_path, ids["candidate"]) == DEGRADED


def test_repair_apply_clears_candidates_only(tmp_path: Path) -> None:
    """--apply clears the candidate and leaves unverifiable rows as they were."""
    ids = make_sessions(tmp_path)
    result = run(tmp_path, "sessions", "repair-prompts", "--apply")
    assert result.exit_code == 0, result.output
    assert f"{ids['candidate']}: candidate, cleared" in result.output
    assert "cleared 1 stored prompt(s)" in result.output
    assert stored(tmp_path, ids["candidate"]) is None
    assert stored(tmp_path, ids["memory_only"]) == DEGRADED
    assert stored(tmp_path, ids["no_pin"]) == DEGRADED


def test_repair_json_lists_every_session(tmp_path: Path) -> None:
    """--json gives counts per class and one row per session with its proposed action."""
    ids = make_sessions(tmp_path)
    data = json.loads(run(tmp_path, "sessions", "repair-prompts", "--json").output)
    assert data["applied"] is False and data["to_clear"] == 1 and data["cleared"] == 0
    assert data["counts"] == {
        "candidate": 1,
        "unverifiable_no_pin": 1,
        "unverifiable_memory_only": 1,
        "healthy": 1,
        "no_prompt": 1,
    }
    actions = {row["session_id"]: row["action"] for row in data["sessions"]}
    assert actions[ids["candidate"]] == "clear"
    assert {actions[ids[k]] for k in ("memory_only", "no_pin", "healthy", "no_prompt")} == {"none"}


@pytest.mark.parametrize("kind", ["memory_only", "no_pin"])
def test_repair_named_session_is_cleared_explicitly(tmp_path: Path, kind: str) -> None:
    """Naming an unverifiable SESSION_ID proposes clearing it, and --apply clears it."""
    ids = make_sessions(tmp_path)
    dry = run(tmp_path, "sessions", "repair-prompts", ids[kind])
    assert dry.exit_code == 0, dry.output
    assert f"{ids[kind]}: unverifiable_{kind}, will be cleared on --apply - named explicitly" in (
        dry.output
    )
    assert "will be cleared on --apply" in dry.output.splitlines()[-1]
    assert "not changed" not in dry.output and "would clear" not in dry.output
    assert stored(tmp_path, ids[kind]) == DEGRADED
    applied = run(tmp_path, "sessions", "repair-prompts", ids[kind], "--apply", "--json")
    data = json.loads(applied.output)
    assert data["applied"] is True and data["cleared"] == 1
    [row] = data["sessions"]
    assert row["kind"] == f"unverifiable_{kind}" and row["explicit"] is True
    assert row["explanation"].startswith("named explicitly, so --apply clears it")
    assert stored(tmp_path, ids[kind]) is None
    assert stored(tmp_path, ids["candidate"]) == DEGRADED


def test_refresh_in_a_real_subprocess(tmp_path: Path) -> None:
    """The installed entry point records requests that a later process sees."""
    ids = make_sessions(tmp_path)
    entry = [sys.executable, "-c", "from hermes_es.cli import main; main()"]
    proc = subprocess.run(
        [*entry, "sessions", "refresh-prompts", "--session", ids["candidate"]],
        env={"HERMES_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("1 session holds a stored prompt")
    assert pending(tmp_path) == {ids["candidate"]}


def test_repair_named_healthy_session_says_it_will_be_cleared(tmp_path: Path) -> None:
    """A named healthy session is cleared explicitly, its class kept only as information."""
    ids = make_sessions(tmp_path)
    dry = run(tmp_path, "sessions", "repair-prompts", ids["healthy"])
    assert dry.exit_code == 0, dry.output
    line = dry.output.splitlines()[0]
    assert line.startswith(f"{ids['healthy']}: healthy, will be cleared on --apply - ")
    assert "scan finding: the stored prompt matches its tools pin" in line
    assert "nothing to repair" not in dry.output and "would clear" not in dry.output
    data = json.loads(run(tmp_path, "sessions", "repair-prompts", ids["healthy"], "--json").output)
    [row] = data["sessions"]
    assert (row["kind"], row["action"], row["explicit"]) == ("healthy", "clear", True)
    assert row["explanation"] in line
    assert stored(tmp_path, ids["healthy"]) == HEALTHY
    applied = run(tmp_path, "sessions", "repair-prompts", ids["healthy"], "--apply")
    assert f"{ids['healthy']}: healthy, cleared - named explicitly" in applied.output
    assert stored(tmp_path, ids["healthy"]) is None
