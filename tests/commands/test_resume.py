"""Resume resolution (-c, -r, --in, breadcrumbs, lineage, chain tip) and config pickup."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.resume import (
    last_pickup,
    pick_session,
    picker_sessions,
    record_resume,
    restore_cwd,
)
from hermes_es.config import HermesConfig, ModelConfig, config_fingerprint
from hermes_es.errors import SessionNotFoundError
from hermes_es.terminal import write_breadcrumb


def test_bare_continue_uses_this_terminals_breadcrumb(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """Two terminals each resume their own session; no breadcrumb falls back to the latest."""
    a = engine.start_session("cli")
    b = engine.start_session("cli")
    write_breadcrumb(tmp_path, "tmux:x:%1", a)
    write_breadcrumb(tmp_path, "tmux:x:%2", b)
    conn = engine.store.connection()
    common = {"continue_name": "", "breadcrumb_home": tmp_path}
    assert pick_session(conn, terminal="tmux:x:%1", **common).session_id == a  # type: ignore[arg-type]
    assert pick_session(conn, terminal="tmux:x:%2", **common).session_id == b  # type: ignore[arg-type]
    fresh = pick_session(conn, terminal="tmux:x:%3", **common)  # type: ignore[arg-type]
    assert (fresh.session_id, fresh.how) == (b, "latest")
    off = pick_session(conn, terminal="tmux:x:%1", terminal_continue=False, **common)  # type: ignore[arg-type]
    assert off.session_id == b


def test_stale_breadcrumb_falls_back_to_latest(engine: SessionEngine, tmp_path: Path) -> None:
    """A breadcrumb older than 30 days is ignored."""
    a = engine.start_session("cli")
    b = engine.start_session("cli")
    write_breadcrumb(tmp_path, "tty:/dev/pts/9", a, now=time.time() - 31 * 86400)
    picked = pick_session(
        engine.store.connection(),
        continue_name="",
        breadcrumb_home=tmp_path,
        terminal="tty:/dev/pts/9",
    )
    assert (picked.session_id, picked.how) == (b, "latest")


def test_continue_counts_oneshot_but_not_gateway_sessions(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """Bare -c picks the last CLI-history session, one-shot runs included, gateway ones not."""
    engine.start_session("cli")
    one = engine.start_session("oneshot")
    engine.start_session("telegram")
    assert pick_session(engine.store.connection(), continue_name="").session_id == one
    assert pick_session(engine.store.connection(), resume_ref="latest").session_id == one


def test_name_picks_newest_lineage_variant_and_chain_tip(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """-c "my project" picks the newest '#N' variant, and a split session resumes at its tip."""
    engine.start_session("cli", title="my project")
    engine.start_session("cli", title="my project #2")
    third = engine.start_session("cli", title="my project #3")
    engine.append_message(third, "user", "hi")
    tip = engine.continue_session(third, [{"role": "system", "content": "summary"}])
    conn = engine.store.connection()
    assert pick_session(conn, continue_name="my project").session_id == tip
    assert engine.get(tip).title == "my project #4"
    assert pick_session(conn, resume_ref=third).session_id == tip


def test_in_dir_picks_latest_session_of_that_workspace(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """--in DIR with -c picks the most recent session whose workspace is DIR's."""
    proj, other = tmp_path / "proj", tmp_path / "other"
    (proj / ".git").mkdir(parents=True)
    (proj / "src").mkdir()
    other.mkdir()
    mine = engine.start_session("cli", cwd=str(proj))
    engine.start_session("cli", cwd=str(other))
    conn = engine.store.connection()
    assert pick_session(conn, continue_name="", in_dir=proj / "src").session_id == mine
    assert pick_session(conn, resume_ref="latest", in_dir=proj).session_id == mine
    with pytest.raises(SessionNotFoundError, match="workspace"):
        pick_session(conn, continue_name="", in_dir=tmp_path / "nowhere")


def test_unknown_name_says_how_to_list(engine: SessionEngine, tmp_path: Path) -> None:
    """An unknown name fails with a message naming 'hermes sessions list'."""
    engine.start_session("cli")
    with pytest.raises(SessionNotFoundError, match="hermes sessions list"):
        pick_session(engine.store.connection(), continue_name="nope nope")


def test_resume_picks_up_config_but_keeps_model_and_reasoning(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """A resume records the new config, keeps the session's model and /reasoning level."""
    old = HermesConfig()
    new = HermesConfig(
        max_turns=5,
        model=ModelConfig(name="other-model", reasoning_effort="low"),
    )
    sid = engine.start_session(
        "cli",
        model="m1",
        model_config={"pickup": config_fingerprint(old)},
        launch_flags={"argv": ["-m", "m1"]},
    )
    engine.set_reasoning(sid, "high")
    resumed = record_resume(engine, sid, new)
    assert resumed.model == "m1" and resumed.reasoning == "high"
    assert resumed.launch_flags == {"argv": ["-m", "m1"]}
    assert "max_turns" in resumed.changed and "model.reasoning_effort" in resumed.changed
    assert last_pickup(engine.store.connection(), sid) == config_fingerprint(new)
    again = record_resume(engine, sid, new)
    assert again.changed == []


def test_resume_without_reasoning_change_takes_profile_default(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """Without a /reasoning change, the profile's current default reasoning effort applies."""
    sid = engine.start_session("cli", model="m1")
    resumed = record_resume(engine, sid, HermesConfig(model=ModelConfig(reasoning_effort="low")))
    assert resumed.reasoning == "low"


def test_restore_cwd_failure_never_raises(tmp_path: Path) -> None:
    """Restoring a removed directory reports a message and leaves the cwd unchanged."""
    here = os.getcwd()
    ok, message = restore_cwd(str(tmp_path / "gone"))
    assert not ok and "could not restore" in message and os.getcwd() == here


def test_picker_hides_oneshot_tool_and_kanban(engine: SessionEngine, tmp_path: Path) -> None:
    """/sessions lists cli sessions but hides oneshot, tool and kanban runs."""
    keep = engine.start_session("cli")
    for source in ("oneshot", "tool", "kanban"):
        engine.start_session(source)
    rows = picker_sessions(engine.store.connection())
    assert [r.session_id for r in rows] == [keep]
