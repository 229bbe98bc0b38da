"""Which tool names a session gets for the toolsets named in its configuration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from hermes_es.errors import ConfigError

TOOLSETS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "core": (
            "terminal",
            "read_file",
            "list_directory",
            "write_file",
            "search_files",
            "skill_manage",
            "memory",
            "session_search",
            "todo",
        ),
        "memory": ("memory",),
        "web": ("web_search", "web_extract"),
        "skills": ("skill_view", "skill_manage", "skills_list"),
    }
)
"""Every known toolset and the tools it enables; the single source of that mapping."""


def known_toolsets() -> list[str]:
    """Return the names of every known toolset, sorted."""
    return sorted(TOOLSETS)


def tools_for_toolsets(toolsets: Sequence[str]) -> list[str]:
    """Return the sorted, deduplicated tool names enabled by ``toolsets``."""
    if isinstance(toolsets, str):
        raise ConfigError(
            f"toolsets must be a list of names, not the string {toolsets!r}",
            subject="toolsets",
        )
    tools: set[str] = set()
    for name in toolsets:
        tools.update(_toolset(name))
    return sorted(tools)


def _toolset(name: object) -> tuple[str, ...]:
    """Return the tools of one toolset, or raise ConfigError naming the unknown toolset."""
    if not isinstance(name, str):
        raise ConfigError(
            f"toolsets: expected a toolset name, got {type(name).__name__} {name!r}",
            subject=repr(name),
        )
    try:
        return TOOLSETS[name]
    except KeyError:
        known = ", ".join(known_toolsets())
        raise ConfigError(
            f"toolsets: unknown toolset {name!r} (known: {known})", subject=name
        ) from None
