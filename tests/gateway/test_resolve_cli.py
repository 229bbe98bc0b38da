"""``hermes sessions resolve`` and the unknown state in ``list``/``show`` (embedded mode)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hermes_es.cli.app import cli
from hermes_es.commands import turns
from hermes_es.commands.engine import SessionEngine


def _unknown_session(home: Path) -> str:
    with SessionEngine(home / "state.db", actor="uid:0") as engine:
        sid = engine.start_session("cli", cwd=str(home))
        engine.append_message(sid, "user", "earlier")
        turns.admit(engine, sid, submission_id="a", client_kind="cli", text="first")
        turns.admit(engine, sid, submission_id="b", client_kind="cli", text="second")
        turns.start_next(engine, sid, epoch=1)
        turns.recover(engine, epoch=2)
    return sid


def test_list_and_show_display_the_unknown_turn(home: Path) -> None:
    """``sessions list`` marks the session and ``show`` says how to resolve it."""
    sid = _unknown_session(home)
    runner = CliRunner()
    listed = runner.invoke(cli, ["sessions", "list"])
    assert listed.exit_code == 0, listed.output
    assert f"{sid} [unknown turn]" in listed.output
    data = json.loads(runner.invoke(cli, ["sessions", "list", "--json"]).output)
    assert data[0]["turn_state"] == "unknown"
    shown = runner.invoke(cli, ["sessions", "show", sid])
    assert f"hermes sessions resolve {sid} --discard" in shown.output
    assert (
        json.loads(runner.invoke(cli, ["sessions", "show", sid, "--json"]).output)["turn_state"]
        == "unknown"
    )


def test_resolve_discard_frees_the_followers(home: Path) -> None:
    """``resolve --discard`` records the resolution; the follower is next to run."""
    sid = _unknown_session(home)
    result = CliRunner().invoke(cli, ["sessions", "resolve", sid[:12], "--discard"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{sid}: turn 1 discarded"
    with SessionEngine(home / "state.db") as engine:
        state = engine.get(sid)
        assert state.turn_state == "queued" and state.turn_queue == [2]
    history = CliRunner().invoke(cli, ["sessions", "history", sid])
    assert "turn 1 resolved (discard)" in history.output


def test_resolve_refusals_exit_nonzero(home: Path) -> None:
    """Without --discard it is a usage error; with nothing unknown it is refused."""
    sid = _unknown_session(home)
    runner = CliRunner()
    usage = runner.invoke(cli, ["sessions", "resolve", sid])
    assert usage.exit_code == 2 and "--discard" in usage.output
    assert runner.invoke(cli, ["sessions", "resolve", sid, "--discard"]).exit_code == 0
    again = runner.invoke(cli, ["sessions", "resolve", sid, "--discard"])
    assert again.exit_code == 1 and "has no unknown turn" in again.output
