"""Tests for the per-turn system prompt: stored bytes, first-turn build, refresh and repair."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.prompting import ensure_turn_prompt, repin_tools_on_resume
from hermes_es.commands.prompts_admin import refresh_prompts
from hermes_es.prompts.sources import SKILL_SAFETY_HEADING, build_system_prompt
from hermes_es.queries.history import session_history

TOOLS = ["memory", "skill_manage", "terminal"]


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    """A profile directory with a persona, one skill and memory blocks."""
    home = tmp_path / "home"
    (home / "skills" / "deploy").mkdir(parents=True)
    (home / "SOUL.md").write_text("You are terse.\n")
    (home / "skills" / "deploy" / "SKILL.md").write_text("---\nname: deploy\n---\nShip it.\n")
    (home / "memories").mkdir()
    (home / "memories" / "MEMORY.md").write_text("The user deploys on Fridays.\n")
    (home / "USER.md").write_text("Name: Ada.\n")
    return home


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A project directory (its own git root) with an AGENTS.md."""
    work = tmp_path / "project"
    (work / ".git").mkdir(parents=True)
    (work / "AGENTS.md").write_text("Run make test before committing.\n")
    return work


@pytest.fixture
def engine(profile: Path) -> Iterator[SessionEngine]:
    """An engine over the profile's state.db."""
    eng = SessionEngine.open(profile)
    yield eng
    eng.close()


def turn(engine: SessionEngine, sid: str, profile: Path, workspace: Path | None) -> str:
    """The prompt for one turn with the default tool surface."""
    return ensure_turn_prompt(engine, sid, profile_dir=profile, workspace=workspace, tools=TOOLS)


def prompt_events(engine: SessionEngine, sid: str) -> list[str]:
    """Summaries of the session's prompt-related events, oldest first."""
    history = session_history(engine.store.connection(), sid)
    return [h.summary for h in history if h.type.startswith("hermes.prompt.")]


def test_first_turn_builds_from_sources_and_pins_tools(
    engine: SessionEngine, profile: Path, workspace: Path
) -> None:
    """The first turn stores the prompt built from the sources and pins the tool list."""
    sid = engine.start_session("cli", cwd=str(workspace))
    text = turn(engine, sid, profile, workspace)
    expected = build_system_prompt(profile, workspace, TOOLS)
    assert text == expected.text
    state = engine.get(sid)
    assert state.prompt_hash == expected.sha256
    assert state.tools == TOOLS
    assert engine.stored_prompt(sid) == text
    assert any(s.endswith("(first_turn)") for s in prompt_events(engine, sid))


def test_later_turns_and_restarts_send_identical_bytes(profile: Path, workspace: Path) -> None:
    """Every later turn, also after reopening the store, returns the stored bytes unchanged."""
    with SessionEngine.open(profile) as eng:
        sid = eng.start_session("cli", cwd=str(workspace))
        first = turn(eng, sid, profile, workspace)
        second = turn(eng, sid, profile, workspace)
        version = eng.get(sid).version
    with SessionEngine.open(profile) as reopened:
        third = turn(reopened, sid, profile, workspace)
        assert reopened.get(sid).version == version
    assert first.encode() == second.encode() == third.encode()


def test_changed_sources_without_refresh_change_nothing(
    engine: SessionEngine, profile: Path, workspace: Path
) -> None:
    """Editing SOUL.md, skills, AGENTS.md or memory does not reach a running session."""
    sid = engine.start_session("cli", cwd=str(workspace))
    before = turn(engine, sid, profile, workspace)
    (profile / "SOUL.md").write_text("You are verbose.\n")
    (workspace / "AGENTS.md").write_text("Never commit.\n")
    (profile / "memories" / "MEMORY.md").write_text("Deploys moved to Mondays.\n")
    assert turn(engine, sid, profile, workspace) == before
    assert "You are terse." in before


def test_refresh_rebuilds_from_current_sources_on_next_turn_only(
    engine: SessionEngine, profile: Path, workspace: Path
) -> None:
    """The turn after a refresh rebuilds from current sources (memory too); later turns reuse it."""
    sid = engine.start_session("cli", cwd=str(workspace))
    engine.append_message(sid, "user", "hello")
    before = turn(engine, sid, profile, workspace)
    (profile / "SOUL.md").write_text("You are verbose.\n")
    (profile / "memories" / "MEMORY.md").write_text("Deploys moved to Mondays.\n")
    (profile / "USER.md").write_text("Name: Grace.\n")
    assert refresh_prompts(engine).requested == 1
    assert engine.get(sid).refresh_pending
    rebuilt = turn(engine, sid, profile, workspace)
    assert rebuilt != before
    assert rebuilt == build_system_prompt(profile, workspace, TOOLS).text
    assert "You are verbose." in rebuilt
    assert "Deploys moved to Mondays." in rebuilt
    assert "Name: Grace." in rebuilt
    state = engine.get(sid)
    assert not state.refresh_pending
    assert state.message_count == 1
    assert engine.stored_prompt(sid) == rebuilt
    (profile / "SOUL.md").write_text("You are curt.\n")
    assert turn(engine, sid, profile, workspace) == rebuilt
    assert [s.rsplit("(", 1)[-1] for s in prompt_events(engine, sid) if "system prompt" in s] == [
        "first_turn)",
        "refresh)",
    ]


def test_refresh_keeps_the_pinned_tools(
    engine: SessionEngine, profile: Path, workspace: Path
) -> None:
    """A refresh rebuilds with the session's pinned tools, not the tools offered this turn."""
    sid = engine.start_session("cli", cwd=str(workspace))
    turn(engine, sid, profile, workspace)
    engine.request_prompt_refresh([sid])
    rebuilt = ensure_turn_prompt(
        engine, sid, profile_dir=profile, workspace=workspace, tools=["memory", "web_search"]
    )
    assert engine.get(sid).tools == TOOLS
    assert rebuilt == build_system_prompt(profile, workspace, TOOLS).text
    assert "web_search" not in rebuilt


def test_refresh_request_survives_a_restart(profile: Path, workspace: Path) -> None:
    """A refresh recorded before a restart is honoured by the first turn after it."""
    with SessionEngine.open(profile) as eng:
        sid = eng.start_session("cli", cwd=str(workspace))
        before = turn(eng, sid, profile, workspace)
        (profile / "SOUL.md").write_text("You are verbose.\n")
        eng.request_prompt_refresh([sid])
    with SessionEngine.open(profile) as reopened:
        assert reopened.get(sid).refresh_pending
        after = turn(reopened, sid, profile, workspace)
    assert after != before
    assert "You are verbose." in after


def test_refresh_touches_only_the_targeted_session(
    engine: SessionEngine, profile: Path, workspace: Path
) -> None:
    """Refreshing one session leaves every other session's stored bytes as they were."""
    one = engine.start_session("cli", cwd=str(workspace))
    other = engine.start_session("cli", cwd=str(workspace))
    first_one = turn(engine, one, profile, workspace)
    first_other = turn(engine, other, profile, workspace)
    (profile / "SOUL.md").write_text("You are verbose.\n")
    result = refresh_prompts(engine, one)
    assert (result.targeted, result.holding, result.requested) == ([one], 1, 1)
    assert not engine.get(other).refresh_pending
    assert turn(engine, other, profile, workspace) == first_other
    assert turn(engine, one, profile, workspace) != first_one


def test_session_started_after_refresh_is_not_rebuilt(
    engine: SessionEngine, profile: Path, workspace: Path
) -> None:
    """A session started after the request already has the new prompt and keeps it."""
    old = engine.start_session("cli", cwd=str(workspace))
    turn(engine, old, profile, workspace)
    (profile / "SOUL.md").write_text("You are verbose.\n")
    refresh_prompts(engine)
    fresh_text = build_system_prompt(profile, workspace, TOOLS).text
    new = engine.start_session("cli", cwd=str(workspace), system_prompt=fresh_text, tools=TOOLS)
    version = engine.get(new).version
    assert not engine.get(new).refresh_pending
    assert turn(engine, new, profile, workspace) == fresh_text
    assert engine.get(new).version == version
    assert turn(engine, old, profile, workspace) == fresh_text


def test_first_turn_uses_the_tools_pinned_at_start(
    engine: SessionEngine, profile: Path, workspace: Path
) -> None:
    """A session pinned at start builds with its pin, not the tools offered on the turn."""
    sid = engine.start_session("cli", cwd=str(workspace), tools=["memory"])
    text = turn(engine, sid, profile, workspace)
    assert SKILL_SAFETY_HEADING not in text
    assert engine.get(sid).tools == ["memory"]


def test_cleared_prompt_is_rebuilt_as_repair(
    engine: SessionEngine, profile: Path, workspace: Path
) -> None:
    """After a repair clear the next turn rebuilds the prompt and records reason repair."""
    sid = engine.start_session("cli", cwd=str(workspace), system_prompt="degraded\n", tools=TOOLS)
    assert turn(engine, sid, profile, workspace) == "degraded\n"
    engine.clear_stored_prompt(sid, reason="repair")
    rebuilt = turn(engine, sid, profile, workspace)
    assert SKILL_SAFETY_HEADING in rebuilt
    assert prompt_events(engine, sid)[-1].endswith("(repair)")


def test_repin_on_resume_replaces_missing_or_memory_only_pins(
    engine: SessionEngine, workspace: Path
) -> None:
    """Resume re-pins the full tool surface over a missing or memory-only pin, never a full one."""
    unpinned = engine.start_session("cli", cwd=str(workspace), system_prompt="p\n")
    memory_only = engine.start_session(
        "cli", cwd=str(workspace), system_prompt="p\n", tools=["memory"]
    )
    full = engine.start_session("cli", cwd=str(workspace), system_prompt="p\n", tools=["todo"])
    assert repin_tools_on_resume(engine, unpinned, ["terminal", "memory", "skill_manage"])
    assert repin_tools_on_resume(engine, memory_only, TOOLS)
    assert not repin_tools_on_resume(engine, full, TOOLS)
    assert engine.get(unpinned).tools == TOOLS
    assert engine.get(memory_only).tools == TOOLS
    assert engine.get(full).tools == ["todo"]
    assert not repin_tools_on_resume(engine, memory_only, TOOLS)
