"""The tool registry: which tools a chat can run, how they are described, how a call runs.

A tool is a name, a description and a JSON-schema ``parameters`` object (what the request's
``tools`` array carries) plus a function of the decoded arguments and a ``ToolContext``. Every
built-in tool is read-only: it reads the session's workspace or the session store, never writes,
never runs a process and never reaches the network. A call the registry cannot honour (unknown
tool, arguments that are not a JSON object, a path outside the workspace, a failure) becomes an
error tool result, never an exception out of the turn: the model sees what went wrong.

Which tools a request advertises is the session's pinned tool list intersected with this
registry (``definitions``): a pinned tool without an implementation here (``terminal``,
``write_file``, ``memory``, …) is not offered, so the model is never told about a tool that
can only fail.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgspec


class ToolError(Exception):
    """An expected tool failure; its text becomes the error tool result."""


class ToolContext(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool may look at: the session's workspace and a read-only store search."""

    workspace: Path | None = None
    """The session's working directory; file tools refuse anything outside it."""
    search: Callable[[str, int], list[str]] | None = None
    """Full-text search over the session store: (query, limit) → one line per hit."""


class Tool(msgspec.Struct, frozen=True, kw_only=True):
    """One runnable tool."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object."""
    run: Callable[[dict[str, Any], ToolContext], str]


class ToolOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """A finished call: the text the model gets back, and whether it is an error."""

    content: str
    is_error: bool = False


_REGISTRY: dict[str, Tool] = {}


def register(tool: Tool) -> Tool:
    """Add a built-in tool (module import time only)."""
    if tool.name in _REGISTRY:
        raise TypeError(f"tool {tool.name!r} is registered twice")
    _REGISTRY[tool.name] = tool
    return tool


REGISTRY: Mapping[str, Tool] = MappingProxyType(_REGISTRY)
"""Every built-in tool by name (filled by ``hermes_es.tools.builtin``)."""


def definitions(names: Sequence[str]) -> list[dict[str, Any]]:
    """The chat-completions ``tools`` array for the pinned ``names`` this registry implements."""
    _load()
    out: list[dict[str, Any]] = []
    for name in dict.fromkeys(names):
        tool = _REGISTRY.get(name)
        if tool is not None:
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
            )
    return out


def run_tool(name: str, arguments: str, context: ToolContext) -> ToolOutcome:
    """Run one call; every failure is an error outcome naming what was wrong."""
    _load()
    tool = _REGISTRY.get(name)
    if tool is None:
        known = ", ".join(sorted(_REGISTRY))
        return ToolOutcome(content=f"error: unknown tool {name!r} (known: {known})", is_error=True)
    try:
        decoded = msgspec.json.decode(arguments.encode() if arguments.strip() else b"{}")
    except msgspec.DecodeError as exc:
        return ToolOutcome(
            content=f"error: {name}: arguments are not valid JSON ({exc})", is_error=True
        )
    if not isinstance(decoded, dict):
        return ToolOutcome(
            content=f"error: {name}: arguments must be a JSON object, got {type(decoded).__name__}",
            is_error=True,
        )
    try:
        return ToolOutcome(content=tool.run(decoded, context))
    except ToolError as exc:
        return ToolOutcome(content=f"error: {name}: {exc}", is_error=True)
    except (OSError, ValueError, TypeError) as exc:
        return ToolOutcome(content=f"error: {name} failed: {exc}", is_error=True)


def _load() -> None:
    """Import the built-in tools (once)."""
    if not _REGISTRY:
        import hermes_es.tools.builtin  # noqa: F401
