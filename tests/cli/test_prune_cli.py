"""``hermes sessions prune|optimize``: plans, confirmation, holder refusal, error paths."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner, Result

from hermes_es.cli.app import cli
from hermes_es.commands.engine import SessionEngine

DAY = 86400.0

HOLD = """
import sys, time
from hermes_es.commands.holders import register_holder
with register_holder(sys.argv[1], sys.argv[2]):
    print("ready", flush=True)
    time.sleep(60)
"""


def run(home: Path, *args: str) -> Result:
    """Invoke the hermes CLI in-process with HERMES_HOME=home."""
    return CliRunner().invoke(cli, list(args), env={"HERMES_HOME": str(home)})


def seed(home: Path) -> dict[str, str]:
    """An old ended chat, an old pinned one, an old open one and a recent ended one."""
    at = [time.time() - 200 * DAY]
    with SessionEngine.open(home, clock=lambda: at[0]) as eng:
        ids = {}
        for name in ("old", "pinned", "open"):
            sid = eng.start_session("cli", cwd="/tmp/p", title=name)
            eng.append_message(sid, "user", f"{name} chat")
            ids[name] = sid
        eng.end_session(ids["old"])
        eng.end_session(ids["pinned"])
        eng.pin(ids["pinned"])
        at[0] = time.time()
        ids["recent"] = eng.start_session("cli", cwd="/tmp/p", title="recent")
        eng.end_session(ids["recent"])
    return ids


def spawn_holder(db: Path, kind: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db), kind], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


def test_dry_run_lists_only_old_ended_unpinned(tmp_path: Path) -> None:
    """The default 90-day prune selects the old ended chat and reports why others stay."""
    ids = seed(tmp_path)
    result = run(tmp_path, "sessions", "prune", "--dry-run")
    assert result.exit_code == 0, result.output
    assert ids["old"] in result.output and ids["recent"] not in result.output
    assert "kept: 1 not ended, 1 pinned" in result.output and "nothing deleted" in result.output


def test_prune_yes_deletes(tmp_path: Path) -> None:
    """--yes deletes the selection and reports counts."""
    ids = seed(tmp_path)
    result = run(tmp_path, "sessions", "prune", "--yes", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["deleted"] == [ids["old"]]
    left = [r["id"] for r in json.loads(run(tmp_path, "sessions", "list", "--json").output)]
    assert ids["old"] not in left and ids["pinned"] in left


def test_prune_without_yes_off_a_terminal_refuses(tmp_path: Path) -> None:
    """Without a TTY and without --yes prune exits 1 and deletes nothing."""
    ids = seed(tmp_path)
    result = run(tmp_path, "sessions", "prune")
    assert result.exit_code == 1 and "Error: refusing to prune without --yes" in result.stderr
    assert ids["old"] in run(tmp_path, "sessions", "list").output


def test_prune_bad_values_are_usage_errors(tmp_path: Path) -> None:
    """Malformed --older-than / --before values exit 2 naming the option."""
    seed(tmp_path)
    bad = run(tmp_path, "sessions", "prune", "--older-than", "ages")
    assert bad.exit_code == 2 and "--older-than" in bad.stderr
    bad = run(tmp_path, "sessions", "prune", "--before", "last tuesday")
    assert bad.exit_code == 2 and "--before" in bad.stderr


def test_prune_without_store_is_a_domain_error(tmp_path: Path) -> None:
    """No state.db: exit 1."""
    result = run(tmp_path, "sessions", "prune", "--yes")
    assert result.exit_code == 1 and "Error: no store at" in result.stderr


def test_prune_and_optimize_refuse_while_held_until_holder_dies(tmp_path: Path) -> None:
    """A live chat holder blocks prune and optimize (exit 1, pid and kind); kill -9 unblocks."""
    ids = seed(tmp_path)
    proc = spawn_holder(tmp_path / "state.db", "chat")
    try:
        for args in (("prune", "--yes"), ("optimize",)):
            result = run(tmp_path, "sessions", *args)
            assert result.exit_code == 1, args
            assert f"pid {proc.pid} (chat)" in result.stderr and "--force" in result.stderr
        forced = run(tmp_path, "sessions", "optimize", "--force")
        assert forced.exit_code == 0 and "reclaimed" in forced.output
    finally:
        stop(proc)
    result = run(tmp_path, "sessions", "prune", "--yes")
    assert result.exit_code == 0 and "deleted 1 session(s)" in result.output
    assert ids["old"] not in run(tmp_path, "sessions", "list").output


def test_prune_refuses_while_a_gateway_runs(tmp_path: Path) -> None:
    """A live gateway holder: prune says the gateway would handle it and refuses."""
    seed(tmp_path)
    proc = spawn_holder(tmp_path / "state.db", "gateway")
    try:
        result = run(tmp_path, "sessions", "prune", "--yes")
        assert result.exit_code == 1 and "the gateway (pid" in result.stderr
        assert run(tmp_path, "sessions", "prune", "--yes", "--force").exit_code == 0
    finally:
        stop(proc)


def test_optimize_keeps_data_and_reports_sizes(tmp_path: Path) -> None:
    """optimize merges and vacuums; sessions and search still work afterwards."""
    ids = seed(tmp_path)
    result = run(tmp_path, "sessions", "optimize", "--json")
    assert result.exit_code == 0, result.output
    sizes = json.loads(result.output)
    assert sizes["db_after"] > 0 and sizes["wal_after"] == 0
    hits = json.loads(run(tmp_path, "sessions", "search", "old", "--json").output)
    assert hits[0]["tip_id"] == ids["old"]


def test_optimize_without_store_is_a_domain_error(tmp_path: Path) -> None:
    """No state.db: exit 1."""
    result = run(tmp_path, "sessions", "optimize")
    assert result.exit_code == 1 and "Error: no store at" in result.stderr


def test_help_has_an_example() -> None:
    """prune and optimize --help show an example."""
    for name in ("prune", "optimize"):
        result = CliRunner().invoke(cli, ["sessions", name, "--help"])
        assert result.exit_code == 0 and "Example: hermes sessions" in result.output
