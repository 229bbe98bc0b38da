"""Tests for mapping configured toolsets to tool names."""

from __future__ import annotations

import pytest

from hermes_es.errors import ConfigError
from hermes_es.prompts.tools import known_toolsets, tools_for_toolsets


def test_core_toolset_tools() -> None:
    """The core toolset enables its nine tools, sorted."""
    assert tools_for_toolsets(["core"]) == [
        "list_directory",
        "memory",
        "read_file",
        "search_files",
        "session_search",
        "skill_manage",
        "terminal",
        "todo",
        "write_file",
    ]


def test_small_toolsets() -> None:
    """memory, web and skills map to their own tools."""
    assert tools_for_toolsets(["memory"]) == ["memory"]
    assert tools_for_toolsets(["web"]) == ["web_extract", "web_search"]
    assert tools_for_toolsets(["skills"]) == ["skill_manage", "skill_view", "skills_list"]


def test_union_is_sorted_and_deduplicated() -> None:
    """Overlapping toolsets give each tool once, sorted, whatever the toolset order."""
    forward = tools_for_toolsets(["core", "skills", "memory", "core"])
    backward = tools_for_toolsets(["memory", "skills", "core"])
    assert forward == backward
    assert forward == sorted(set(forward))
    assert forward.count("skill_manage") == 1
    assert "skills_list" in forward


def test_no_toolsets_no_tools() -> None:
    """An empty toolset list enables no tools."""
    assert tools_for_toolsets([]) == []


def test_unknown_toolset_names_it() -> None:
    """An unknown toolset raises ConfigError naming it and listing the known ones."""
    with pytest.raises(ConfigError, match="unknown toolset 'browser'") as info:
        tools_for_toolsets(["core", "browser"])
    assert info.value.subject == "browser"
    assert "core, memory, skills, web" in info.value.message


def test_toolsets_as_string_rejected() -> None:
    """A bare string instead of a list is a ConfigError, not a list of one-letter toolsets."""
    with pytest.raises(ConfigError, match="list of names"):
        tools_for_toolsets("core")


def test_non_string_toolset_rejected() -> None:
    """A non-string entry (e.g. from YAML) is a ConfigError naming the value."""
    with pytest.raises(ConfigError, match="got int 3"):
        tools_for_toolsets(["core", 3])  # type: ignore[list-item]


def test_known_toolsets_sorted() -> None:
    """known_toolsets lists every toolset name, sorted."""
    assert known_toolsets() == ["core", "memory", "skills", "web"]
