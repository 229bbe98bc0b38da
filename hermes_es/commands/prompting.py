"""The system prompt a turn sends: stored bytes, built on the first turn, rebuilt on request.

A session replays the exact bytes stored for it so a provider's prompt cache keeps hitting.
The prompt is built from the profile's sources only when the session holds none (its first turn,
or after ``repair-prompts`` cleared it) or when ``refresh-prompts`` left a request on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_es.prompts.repair import is_memory_only
from hermes_es.prompts.sources import build_system_prompt

if TYPE_CHECKING:
    from hermes_es.aggregates.state import SessionState
    from hermes_es.commands.engine import SessionEngine

__all__ = ["ensure_turn_prompt", "repin_tools_on_resume"]


def ensure_turn_prompt(
    engine: SessionEngine,
    session_id: str,
    *,
    profile_dir: Path,
    workspace: Path | None,
    tools: Sequence[str],
) -> str:
    """Return the exact system prompt text to send for this turn, storing it when built."""
    state = engine.get(session_id)
    if state.prompt_hash and not state.refresh_pending:
        stored = engine.stored_prompt(session_id)
        if stored is not None:
            return stored
    reason = _build_reason(state)
    pinned = state.tools is not None
    tools_pin = list(state.tools) if state.tools is not None else sorted(set(tools))
    built = build_system_prompt(profile_dir, workspace, tools_pin)
    engine.store_system_prompt(
        session_id, built.text, reason=reason, tools=None if pinned else tools_pin
    )
    return built.text


def _build_reason(state: SessionState) -> str:
    """Why the prompt is being built now: first_turn, refresh or repair."""
    if state.prompt_hash:
        return "refresh" if state.refresh_pending else "repair"
    if state.prompt_version:
        return "repair"
    return "first_turn"


def repin_tools_on_resume(
    engine: SessionEngine,
    session_id: str,
    tools: Sequence[str],
    *,
    toolsets_changed: bool = False,
) -> bool:
    """Re-pin the session's tool surface on resume: when its pin is missing or memory-only, or
    when the profile's toolsets changed since the session last ran (``toolsets_changed``).

    Returns whether a new pin was recorded. Otherwise a full pin is left alone: a session
    keeps its tool list (``refresh-prompts`` never changes it). Call it when a session is
    resumed, before its next turn.
    """
    state = engine.get(session_id)
    current = state.tools
    if current is not None and not is_memory_only(current) and not toolsets_changed:
        return False
    wanted = sorted(set(tools))
    if not wanted or current == wanted:
        return False
    engine.pin_tools(session_id, wanted)
    return True
