"""``hermes sessions list|search|stats``: output, JSON, exit codes and error paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from hermes_es.cli.app import cli
from hermes_es.commands.engine import SessionEngine


def run(home: Path, *args: str) -> Result:
    """Invoke the hermes CLI in-process with HERMES_HOME=home."""
    return CliRunner().invoke(cli, list(args), env={"HERMES_HOME": str(home)})


def seed(home: Path) -> dict[str, str]:
    with SessionEngine.open(home) as eng:
        a = eng.start_session("cli", cwd="/tmp/code/my-project", title="payments")
        eng.append_message(a, "user", "how do I deploy the payments service?")
        eng.append_message(a, "assistant", "run the deploy script")
        b = eng.continue_session(a, [{"role": "user", "content": "summary of deploy talk"}])
        one = eng.start_session("oneshot", cwd="/tmp/other")
        eng.append_message(one, "user", "quick deploy question")
        kan = eng.start_session("kanban", cwd="/tmp/other")
        eng.append_message(kan, "user", "kanban deploy job")
    return {"root": a, "tip": b, "oneshot": one, "kanban": kan}


def test_list_shows_chain_tip_and_oneshot(tmp_path: Path) -> None:
    """The table lists the chain once (its tip) and one-shot runs, not kanban."""
    ids = seed(tmp_path)
    result = run(tmp_path, "sessions", "list")
    assert result.exit_code == 0, result.output
    assert ids["tip"] in result.output and ids["oneshot"] in result.output
    assert ids["root"] not in result.output and ids["kanban"] not in result.output
    assert result.output.splitlines()[0].split() == [
        "TITLE", "PREVIEW", "LAST", "ACTIVE", "SOURCE", "ID", "WORKSPACE",
    ]  # fmt: skip


def test_list_json_with_source_and_workspace(tmp_path: Path) -> None:
    """--json prints rows; --source names exactly that source; --workspace filters by basename."""
    ids = seed(tmp_path)
    rows = json.loads(run(tmp_path, "sessions", "list", "--source", "kanban", "--json").output)
    assert [r["id"] for r in rows] == [ids["kanban"]]
    rows = json.loads(
        run(tmp_path, "sessions", "list", "--workspace", "my-project", "--json").output
    )
    assert [(r["id"], r["root_id"], r["segments"]) for r in rows] == [(ids["tip"], ids["root"], 2)]


def test_list_without_store_says_no_sessions(tmp_path: Path) -> None:
    """No state.db yet (a fresh HERMES_HOME): "no sessions", exit 0, and nothing is created."""
    result = run(tmp_path, "sessions", "list")
    assert result.exit_code == 0, result.output
    assert result.stdout == "no sessions\n" and result.stderr == ""
    assert run(tmp_path, "sessions", "list", "--json").stdout.strip() == "[]"
    assert not (tmp_path / "state.db").exists()


def test_list_bad_limit_is_a_usage_error(tmp_path: Path) -> None:
    """A negative --limit is a usage error (exit 2)."""
    seed(tmp_path)
    result = run(tmp_path, "sessions", "list", "--limit", "-1")
    assert result.exit_code == 2 and "--limit" in result.stderr


def test_search_groups_chain_and_marks_matches(tmp_path: Path) -> None:
    """Search prints one group per conversation with highlighted matches and context."""
    ids = seed(tmp_path)
    result = run(tmp_path, "sessions", "search", "payments")
    assert result.exit_code == 0, result.output
    assert result.output.count("── ") == 1 and ids["tip"] in result.output
    assert "**payments**" in result.output and "↓ assistant: run the deploy script" in result.output


def test_search_json_and_automation_scope(tmp_path: Path) -> None:
    """--json groups hits; kanban is searched only when named."""
    seed(tmp_path)
    groups = json.loads(run(tmp_path, "sessions", "search", "deploy", "--json").output)
    assert {g["source"] for g in groups} == {"cli", "oneshot"}
    groups = json.loads(
        run(tmp_path, "sessions", "search", "deploy", "--source", "kanban", "--json").output
    )
    assert [g["source"] for g in groups] == ["kanban"]


def test_search_hostile_input_is_safe(tmp_path: Path) -> None:
    """FTS syntax in the query never errors."""
    seed(tmp_path)
    for query in ['"unbalanced', "NEAR(", "*", "-deploy", "(((", "a:b ^c", "OR AND NOT"]:
        result = run(tmp_path, "sessions", "search", "--", query)
        assert result.exit_code == 0, (query, result.output)


def test_search_bad_role_is_a_usage_error(tmp_path: Path) -> None:
    """An unknown --role is a usage error (exit 2)."""
    seed(tmp_path)
    result = run(tmp_path, "sessions", "search", "deploy", "--role", "robot")
    assert result.exit_code == 2 and "--role" in result.stderr


def test_stats_json(tmp_path: Path) -> None:
    """Stats count conversations and messages per source and report the file sizes."""
    seed(tmp_path)
    stats = json.loads(run(tmp_path, "sessions", "stats", "--json").output)
    assert stats["sessions"] == 4 and stats["conversations"] == 3
    assert stats["db_bytes"] > 0 and stats["messages"] == 5
    assert {s["source"] for s in stats["by_source"]} == {"cli", "oneshot", "kanban"}


def test_help_has_an_example() -> None:
    """Every read command's --help shows an example."""
    for name in ("list", "search", "stats"):
        result = CliRunner().invoke(cli, ["sessions", name, "--help"])
        assert result.exit_code == 0 and "Example: hermes sessions" in result.output


def test_list_does_not_import_eventsourcing_or_rich(tmp_path: Path) -> None:
    """A real `hermes sessions list` process never loads eventsourcing or rich, nor the event
    types, aggregates or commands (the write side), nor shutil: the list path stays lean."""
    seed(tmp_path)
    code = (
        "import sys\nfrom hermes_es.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', 'eventsourcing' in sys.modules, 'rich' in sys.modules)\n"
        "print('DOMAIN', sorted(m for m in sys.modules if m.startswith(('hermes_es.events',"
        " 'hermes_es.aggregates', 'hermes_es.commands')) or m == 'shutil'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "sessions", "list"],
        env={"HERMES_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert "LOADED False False" in out.stdout, out.stderr
    assert "DOMAIN []" in out.stdout, out.stdout  # no event types, aggregates, nor shutil
