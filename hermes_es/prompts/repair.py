"""Classify stored system prompts for ``hermes sessions repair-prompts``.

Older builds could persist a maintenance agent's reduced-toolset prompt over a live session.
Such a prompt lacks the ``## Skill Safety`` guidance even though the session's tools pin holds
``skill_manage`` (which always emits that guidance). The scan is conservative: only that
combination is a repair candidate; rows whose pin cannot tell are reported as unverifiable.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

import msgspec

from hermes_es.errors import ValidationError
from hermes_es.prompts.sources import SKILL_SAFETY_HEADING

RepairClass = Literal[
    "candidate", "unverifiable_no_pin", "unverifiable_memory_only", "healthy", "no_prompt"
]
"""What the repair scan concludes about one session's stored prompt."""

REPAIR_CLASSES: tuple[RepairClass, ...] = get_args(RepairClass)
"""Every repair class, in the order a report lists them."""

_HEADING_LINE = re.compile(rf"^{re.escape(SKILL_SAFETY_HEADING)}[ \t]*\r?$", re.MULTILINE)

_EXPLANATIONS: dict[RepairClass, str] = {
    "candidate": (
        "the stored prompt lacks the Skill Safety guidance although the session's tools "
        "include skill_manage; it was likely overwritten by a reduced-toolset maintenance "
        "prompt and will be rebuilt"
    ),
    "unverifiable_no_pin": (
        "the stored prompt lacks the Skill Safety guidance and the session has no readable "
        "tools pin, so the scan cannot tell whether it is degraded; not changed "
        "(repair it explicitly by SESSION_ID if needed)"
    ),
    "unverifiable_memory_only": (
        "the stored prompt lacks the Skill Safety guidance and the tools pin is memory-only, "
        "which is also a legitimate toolsets: [memory] setup; not changed (resuming the "
        "session re-pins its tools, after which a scan can decide)"
    ),
    "healthy": "the stored prompt matches its tools pin; nothing to repair",
    "no_prompt": "the session has no stored prompt; its next turn builds one",
}


def has_skill_safety(prompt: str) -> bool:
    """Return whether ``prompt`` carries the Skill Safety heading on a line of its own."""
    return _HEADING_LINE.search(prompt) is not None


def is_memory_tool(name: str) -> bool:
    """Return whether ``name`` is a memory tool (``memory`` or ``memory_*``)."""
    return name == "memory" or name.startswith("memory_")


def is_memory_only(tools_pin: list[str]) -> bool:
    """Return whether a non-empty tools pin holds nothing but memory tools."""
    return bool(tools_pin) and all(is_memory_tool(name) for name in tools_pin)


def parse_tools_pin(raw: str | bytes | None) -> list[str] | None:
    """Decode a stored JSON tools pin; ``None`` when missing or not a list of names."""
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw, type=list[str])
    except msgspec.ValidationError:
        return None
    except msgspec.DecodeError:
        return None


def classify(stored_prompt: str | None, tools_pin: list[str] | None) -> RepairClass:
    """Classify one session's stored prompt against its persisted tools pin.

    A prompt that already carries the Skill Safety guidance is healthy whatever its pin says:
    nothing is missing from it. Only prompts lacking the guidance are judged by their pin.
    """
    if stored_prompt is None or not stored_prompt.strip():
        return "no_prompt"
    if has_skill_safety(stored_prompt):
        return "healthy"
    if tools_pin is None:
        return "unverifiable_no_pin"
    if is_memory_only(tools_pin):
        return "unverifiable_memory_only"
    if "skill_manage" in tools_pin:
        return "candidate"
    return "healthy"


def explain(kind: RepairClass) -> str:
    """Return a one-sentence human explanation of a repair class."""
    try:
        return _EXPLANATIONS[kind]
    except KeyError:
        known = ", ".join(REPAIR_CLASSES)
        raise ValidationError(
            f"unknown repair class {kind!r} (known: {known})", subject=str(kind)
        ) from None
