"""``hermes sessions rename|pin|unpin|archive|unarchive|delete``: effects and error paths."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from hermes_es.cli.app import cli
from hermes_es.commands.engine import SessionEngine


def run(home: Path, *args: str) -> Result:
    """Invoke the hermes CLI in-process with HERMES_HOME=home."""
    return CliRunner().invoke(cli, list(args), env={"HERMES_HOME": str(home)})


def seed(home: Path) -> tuple[str, str, str]:
    with SessionEngine.open(home) as eng:
        a = eng.start_session("cli", cwd="/tmp/p", title="alpha")
        eng.append_message(a, "user", "hello")
        tip = eng.continue_session(a, [{"role": "user", "content": "summary"}])
        b = eng.start_session("cli", cwd="/tmp/p", title="beta")
        eng.append_message(b, "user", "other")
    return a, tip, b


def state(home: Path, sid: str):  # type: ignore[no-untyped-def]
    with SessionEngine.open(home) as eng:
        return eng.get(sid)


def listed(home: Path, *extra: str) -> list[str]:
    return [r["id"] for r in json.loads(run(home, "sessions", "list", "--json", *extra).output)]


def test_rename_sets_title(tmp_path: Path) -> None:
    """rename sets the title of the resolved session."""
    _, _, b = seed(tmp_path)
    result = run(tmp_path, "sessions", "rename", "beta", "gamma")
    assert result.exit_code == 0 and state(tmp_path, b).title == "gamma"


def test_rename_duplicate_title_is_a_domain_error(tmp_path: Path) -> None:
    """A title another session holds: exit 1, Error: naming the owner."""
    a, _, _ = seed(tmp_path)
    result = run(tmp_path, "sessions", "rename", "beta", "alpha")
    assert result.exit_code == 1 and f"Error: title 'alpha' is already used by session {a}" in (
        result.stderr
    )


def test_unknown_session_is_a_domain_error(tmp_path: Path) -> None:
    """An id that matches nothing: exit 1 with the hint to list sessions."""
    seed(tmp_path)
    for cmd in ("pin", "unpin", "archive", "unarchive", "delete"):
        result = run(tmp_path, "sessions", cmd, "nope-nothing")
        assert result.exit_code == 1, cmd
        assert "Error: no session matches 'nope-nothing'" in result.stderr


def test_no_store_is_a_domain_error(tmp_path: Path) -> None:
    """Curating without a state.db: exit 1, no store is created."""
    result = run(tmp_path, "sessions", "pin", "x")
    assert result.exit_code == 1 and "Error: no sessions yet" in result.stderr
    assert not (tmp_path / "state.db").exists()


def test_pin_goes_through_tip_and_unpin_clears_all(tmp_path: Path) -> None:
    """pin on an old segment pins the live tip; unpin clears every segment."""
    a, tip, _ = seed(tmp_path)
    assert run(tmp_path, "sessions", "pin", a).output.strip() == f"pinned {tip}"
    assert state(tmp_path, tip).pinned and not state(tmp_path, a).pinned
    assert run(tmp_path, "sessions", "unpin", tip).exit_code == 0
    assert not state(tmp_path, tip).pinned


def test_pin_needs_an_id(tmp_path: Path) -> None:
    """pin without ids is a usage error (exit 2)."""
    seed(tmp_path)
    assert run(tmp_path, "sessions", "pin").exit_code == 2


def test_archive_and_unarchive_ids(tmp_path: Path) -> None:
    """archive hides the conversation (via its tip); unarchive brings it back."""
    a, tip, b = seed(tmp_path)
    assert run(tmp_path, "sessions", "archive", a).exit_code == 0
    assert listed(tmp_path) == [b] and listed(tmp_path, "--archived") == [tip]
    assert run(tmp_path, "sessions", "unarchive", tip).exit_code == 0
    assert sorted(listed(tmp_path)) == sorted([tip, b])


def test_archive_usage_errors(tmp_path: Path) -> None:
    """archive needs ids or filters, not both; a bad --older-than is a usage error."""
    a, _, _ = seed(tmp_path)
    nothing = run(tmp_path, "sessions", "archive")
    assert nothing.exit_code == 2 and "name sessions to archive" in nothing.stderr
    both = run(tmp_path, "sessions", "archive", a, "--all")
    assert both.exit_code == 2 and "not both" in both.stderr
    bad = run(tmp_path, "sessions", "archive", "--older-than", "soon")
    assert bad.exit_code == 2 and "invalid age 'soon'" in bad.stderr


def test_archive_all_skips_active_chats(tmp_path: Path) -> None:
    """archive --all leaves recent, not-ended chats alone and archives ended ones."""
    _, tip, b = seed(tmp_path)
    with SessionEngine.open(tmp_path) as eng:
        eng.end_session(b)
    result = run(tmp_path, "sessions", "archive", "--all", "--json")
    assert result.exit_code == 0 and json.loads(result.output) == [b]
    assert listed(tmp_path) == [tip]


def test_archive_sweep_uses_config(tmp_path: Path) -> None:
    """archive --sweep reads sessions.auto_archive; 0 means off."""
    seed(tmp_path)
    off = run(tmp_path, "sessions", "archive", "--sweep")
    assert off.exit_code == 0 and "idle sweep is off" in off.output
    (tmp_path / "config.yaml").write_text("sessions:\n  auto_archive: 30\n")
    result = run(tmp_path, "sessions", "archive", "--sweep", "--json")
    assert result.exit_code == 0 and json.loads(result.output) == []


def test_delete_refuses_without_yes_off_a_terminal(tmp_path: Path) -> None:
    """Without a TTY and without --yes, delete refuses (exit 1) and deletes nothing."""
    _, _, b = seed(tmp_path)
    result = run(tmp_path, "sessions", "delete", b)
    assert result.exit_code == 1 and "Error: refusing to delete" in result.stderr
    assert state(tmp_path, b).version > 0


def test_delete_yes_and_chain(tmp_path: Path) -> None:
    """delete --yes removes the session; --chain removes every segment."""
    a, tip, b = seed(tmp_path)
    assert run(tmp_path, "sessions", "delete", b, "--yes").exit_code == 0
    result = run(tmp_path, "sessions", "delete", tip, "--yes", "--chain")
    assert result.exit_code == 0 and f"deleted {a}" in result.output
    assert listed(tmp_path) == []


def test_help_has_an_example() -> None:
    """Every curation command's --help shows an example."""
    for name in ("rename", "pin", "unpin", "archive", "unarchive", "delete"):
        result = CliRunner().invoke(cli, ["sessions", name, "--help"])
        assert result.exit_code == 0 and "Example: hermes sessions" in result.output
