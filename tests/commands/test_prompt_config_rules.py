"""Prompt and config rules on resume and on the first turn: caller prompts kept, tools re-pinned,
default reasoning effort sent, an invalid effort refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hermes_es.commands.chat import Chat
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.resume import record_resume
from hermes_es.config import HermesConfig, ModelConfig, config_fingerprint, parse_config
from hermes_es.errors import ConfigError
from hermes_es.prompts.tools import tools_for_toolsets
from hermes_es.responders.base import ChatMessage, TurnResult
from hermes_es.responders.offline import OfflineResponder


class Recording(OfflineResponder):
    """The offline responder, remembering each call's prompt and reasoning effort."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str | None]] = []

    def respond(self, system_prompt: str, messages: list[ChatMessage], **kw: Any) -> TurnResult:
        self.seen.append((system_prompt, kw.get("reasoning")))
        return super().respond(system_prompt, messages, **kw)


def _chat(engine: SessionEngine, sid: str, tmp_path: Path, config: HermesConfig) -> Chat:
    return Chat(
        engine,
        sid,
        responder=Recording(),
        config=config,
        profile_dir=tmp_path,
        tools=tools_for_toolsets(config.toolsets),
        workspace=tmp_path,
    )


def test_api_prompt_survives_a_cli_resume_byte_for_byte(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """A session started with its own system_prompt sends exactly those bytes after a resume."""
    prompt = "Custom API prompt\n\twith exact bytes ✓\n"
    config = HermesConfig(toolsets=["core", "web"])
    sid = engine.start_session("api", system_prompt=prompt, cwd=str(tmp_path))
    engine.append_message(sid, "user", "earlier")
    record_resume(engine, sid, config)
    chat = _chat(engine, sid, tmp_path, config)
    chat.send("again")
    record_resume(engine, sid, HermesConfig(toolsets=["core"]))  # config changed again
    chat.reload()
    chat.send("and again")
    assert engine.stored_prompt(sid) == prompt
    assert isinstance(chat.responder, Recording)
    assert [p for p, _ in chat.responder.seen] == [prompt, prompt]


def test_resume_repins_tools_when_toolsets_changed(engine: SessionEngine, tmp_path: Path) -> None:
    """A resume after the profile's toolsets changed pins the new tool list (and the tools sent)."""
    before = HermesConfig(toolsets=["core"])
    after = HermesConfig(toolsets=["core", "skills"])
    sid = engine.start_session(
        "cli",
        tools=tools_for_toolsets(before.toolsets),
        model_config={"pickup": config_fingerprint(before)},
        cwd=str(tmp_path),
    )
    same = record_resume(engine, sid, before)
    assert not same.tools_repinned
    changed = record_resume(engine, sid, after)
    state = engine.get(sid)
    assert changed.tools_repinned and "toolsets" in changed.changed
    assert state.tools == tools_for_toolsets(after.toolsets)
    assert "skills_list" in (state.tools or [])


def test_default_reasoning_effort_is_sent_from_the_first_turn(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """A new session's first turn carries the configured model.reasoning_effort."""
    config = HermesConfig(model=ModelConfig(reasoning_effort="high"))
    sid = engine.start_session("cli", cwd=str(tmp_path))
    chat = _chat(engine, sid, tmp_path, config)
    chat.send("hello")
    assert isinstance(chat.responder, Recording)
    assert chat.responder.seen[0][1] == "high"


def test_an_invalid_reasoning_effort_in_config_is_refused_naming_the_key() -> None:
    """model.reasoning_effort outside the /reasoning levels is a ConfigError naming the key."""
    with pytest.raises(ConfigError) as caught:
        parse_config({"model": {"reasoning_effort": "extreme"}}, source="config.yaml")
    assert "$.model.reasoning_effort" in caught.value.message
    assert "extreme" in caught.value.message or "xhigh" in caught.value.message
