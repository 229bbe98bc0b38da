"""Tests for classifying stored prompts in ``hermes sessions repair-prompts``."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_es.errors import ValidationError
from hermes_es.prompts.repair import (
    REPAIR_CLASSES,
    classify,
    explain,
    has_skill_safety,
    is_memory_only,
    parse_tools_pin,
)
from hermes_es.prompts.sources import SKILL_SAFETY_HEADING, build_system_prompt
from hermes_es.prompts.tools import tools_for_toolsets

FULL_PIN = ["memory", "skill_manage", "terminal"]
DEGRADED = "You are Hermes.\n\n## Memory\n\nfacts\n\n## Tools\n\nmemory\n"
HEALTHY = f"You are Hermes.\n\n{SKILL_SAFETY_HEADING}\n\nguidance\n\n## Tools\n\nskill_manage\n"


def test_missing_guidance_with_skill_manage_pin_is_candidate() -> None:
    """A prompt lacking Skill Safety whose pin has skill_manage is a repair candidate."""
    assert classify(DEGRADED, FULL_PIN) == "candidate"


def test_prompt_with_guidance_is_healthy() -> None:
    """A prompt carrying Skill Safety is healthy for a full pin."""
    assert classify(HEALTHY, FULL_PIN) == "healthy"


def test_prompt_with_guidance_is_healthy_whatever_the_pin() -> None:
    """A prompt that already has the guidance is healthy even with no or memory-only pin."""
    assert classify(HEALTHY, None) == "healthy"
    assert classify(HEALTHY, ["memory"]) == "healthy"


def test_missing_guidance_without_skill_manage_is_healthy() -> None:
    """A prompt lacking Skill Safety is healthy when the pin never had skill_manage."""
    assert classify(DEGRADED, ["terminal", "web_search"]) == "healthy"
    assert classify(DEGRADED, []) == "healthy"


def test_no_pin_is_unverifiable() -> None:
    """A prompt lacking Skill Safety with no readable pin is unverifiable_no_pin."""
    assert classify(DEGRADED, None) == "unverifiable_no_pin"


@pytest.mark.parametrize(
    "pin", [["memory"], ["memory", "memory_search"], ["memory_write"], ["memory", "memory"]]
)
def test_memory_only_pin_is_unverifiable(pin: list[str]) -> None:
    """A prompt lacking Skill Safety whose pin holds only memory tools is unverifiable."""
    assert classify(DEGRADED, pin) == "unverifiable_memory_only"


def test_memory_plus_skill_manage_is_candidate_not_memory_only() -> None:
    """A pin with memory and skill_manage is not memory-only, so it is a candidate."""
    assert not is_memory_only(["memory", "skill_manage"])
    assert classify(DEGRADED, ["memory", "skill_manage"]) == "candidate"


def test_memorable_is_not_a_memory_tool() -> None:
    """Only ``memory`` and ``memory_*`` count as memory tools, not any name starting memory."""
    assert not is_memory_only(["memorable"])
    assert classify(DEGRADED, ["memorable"]) == "healthy"


@pytest.mark.parametrize("prompt", [None, "", "  \n"])
def test_no_stored_prompt(prompt: str | None) -> None:
    """A missing or blank stored prompt is no_prompt regardless of the pin."""
    assert classify(prompt, FULL_PIN) == "no_prompt"
    assert classify(prompt, None) == "no_prompt"


def test_heading_must_be_its_own_line() -> None:
    """Only a line reading exactly the heading counts; mentions and deeper headings do not."""
    assert has_skill_safety("intro\n## Skill Safety\nbody")
    assert has_skill_safety("intro\r\n## Skill Safety  \r\nbody")
    assert not has_skill_safety("see the ## Skill Safety section")
    assert not has_skill_safety("### Skill Safety\n")
    assert not has_skill_safety("## Skill Safety notes\n")


def test_built_prompts_classify_by_their_tools(tmp_path: Path) -> None:
    """Prompts built from the core toolset are healthy; memory-only rebuilds are unverifiable."""
    full_tools = tools_for_toolsets(["core"])
    full = build_system_prompt(tmp_path, None, full_tools).text
    reduced = build_system_prompt(tmp_path, None, tools_for_toolsets(["memory"])).text
    assert classify(full, full_tools) == "healthy"
    assert classify(reduced, full_tools) == "candidate"
    assert classify(reduced, ["memory"]) == "unverifiable_memory_only"


def test_parse_tools_pin_reads_json_list() -> None:
    """A stored JSON list of names decodes to the pin, from text or bytes."""
    assert parse_tools_pin('["memory", "skill_manage"]') == ["memory", "skill_manage"]
    assert parse_tools_pin(b'["terminal"]') == ["terminal"]


@pytest.mark.parametrize("raw", [None, "", "not json", '{"a": 1}', "[1, 2]", '"memory"'])
def test_parse_tools_pin_unreadable_is_none(raw: str | None) -> None:
    """A missing, malformed or wrongly typed pin decodes to None (unverifiable)."""
    assert parse_tools_pin(raw) is None


def test_explain_every_class() -> None:
    """Every repair class has its own non-empty explanation."""
    texts = [explain(kind) for kind in REPAIR_CLASSES]
    assert all(texts)
    assert len(set(texts)) == len(REPAIR_CLASSES)
    assert set(REPAIR_CLASSES) == {
        "candidate",
        "unverifiable_no_pin",
        "unverifiable_memory_only",
        "healthy",
        "no_prompt",
    }
    assert "SESSION_ID" in explain("unverifiable_no_pin")
    assert "memory" in explain("unverifiable_memory_only")


def test_explain_unknown_class_raises() -> None:
    """Explaining an unknown class raises ValidationError naming it."""
    with pytest.raises(ValidationError, match="bogus"):
        explain("bogus")  # type: ignore[arg-type]
