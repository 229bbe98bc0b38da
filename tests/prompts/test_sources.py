"""Tests for building a session's system prompt from a profile's files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec
import pytest

from hermes_es.errors import ValidationError
from hermes_es.prompts.sources import (
    IDENTITY_PREAMBLE,
    PROJECT_FILE_MAX_CHARS,
    SKILL_SAFETY_HEADING,
    BuiltPrompt,
    build_system_prompt,
    project_context_files,
    split_front_matter,
)

TOOLS = ["memory", "skill_manage", "terminal"]


def write(path: Path, text: str | bytes) -> Path:
    """Write ``text`` (bytes written verbatim) to ``path``, creating parent directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    """An empty profile directory."""
    directory = tmp_path / "profile"
    directory.mkdir()
    return directory


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository root (``.git`` directory) with a ``src/app`` workspace below it."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "src" / "app").mkdir(parents=True)
    return root


def full_profile(profile: Path, repo: Path) -> None:
    """Populate every prompt source: soul, two skills, project files, memory and user."""
    write(profile / "SOUL.md", "I am a careful pair programmer.\n")
    write(profile / "skills" / "zeta" / "SKILL.md", "Zeta body.\n")
    write(
        profile / "skills" / "alpha" / "SKILL.md",
        "---\nname: Alpha Tool\ndescription: Does alpha things.\n---\nAlpha body.\n",
    )
    write(repo / "AGENTS.md", "Root agents rules.\n")
    write(repo / "src" / "app" / "CLAUDE.md", "App claude rules.\n")
    write(profile / "memories" / "MEMORY.md", "User likes tabs.\n")
    write(profile / "memories" / "USER.md", "Name: Ada.\n")


def test_same_inputs_rebuild_byte_identical(profile: Path, repo: Path) -> None:
    """Building twice from unchanged files gives identical bytes, hash and sources."""
    full_profile(profile, repo)
    first = build_system_prompt(profile, repo / "src" / "app", TOOLS)
    second = build_system_prompt(profile, repo / "src" / "app", list(reversed(TOOLS)))
    assert first.text.encode("utf-8") == second.text.encode("utf-8")
    assert first == second


def test_sha256_is_hex_digest_of_utf8_text(profile: Path) -> None:
    """The sha256 field is the hex SHA-256 of the prompt's UTF-8 bytes."""
    write(profile / "SOUL.md", "Ünïcödé persona — 日本語\n")
    built = build_system_prompt(profile, None, [])
    assert built.sha256 == hashlib.sha256(built.text.encode("utf-8")).hexdigest()


def test_built_prompt_is_frozen(profile: Path) -> None:
    """A BuiltPrompt cannot be modified after it is built."""
    built = build_system_prompt(profile, None, [])
    with pytest.raises(AttributeError):
        built.text = "changed"  # type: ignore[misc]
    assert isinstance(built, msgspec.Struct)


def test_empty_profile_has_preamble_and_tools_only(profile: Path) -> None:
    """A profile with no files yields the preamble and the tools line, and no sources."""
    built = build_system_prompt(profile, None, ["terminal"])
    assert built.text == f"{IDENTITY_PREAMBLE}\n\n## Tools\n\nterminal\n"
    assert built.sources == []


def test_sections_appear_in_fixed_order(profile: Path, repo: Path) -> None:
    """Preamble, soul, skills, safety, project files, memory, user, tools come in that order."""
    full_profile(profile, repo)
    text = build_system_prompt(profile, repo / "src" / "app", TOOLS).text
    markers = [
        IDENTITY_PREAMBLE,
        "I am a careful pair programmer.",
        "## Skill: Alpha Tool",
        "## Skill: zeta",
        SKILL_SAFETY_HEADING,
        "App claude rules.",
        "Root agents rules.",
        "User likes tabs.",
        "Name: Ada.",
        "## Tools",
    ]
    positions = [text.index(marker) for marker in markers]
    assert positions == sorted(positions)
    assert text.startswith(IDENTITY_PREAMBLE)


def test_sources_list_contributing_files_in_prompt_order(profile: Path, repo: Path) -> None:
    """Sources name each contributing file relative to the profile or the workspace."""
    full_profile(profile, repo)
    built = build_system_prompt(profile, repo / "src" / "app", TOOLS)
    assert built.sources == [
        "SOUL.md",
        "skills/alpha/SKILL.md",
        "skills/zeta/SKILL.md",
        "CLAUDE.md",
        "../../AGENTS.md",
        "memories/MEMORY.md",
        "memories/USER.md",
    ]


def test_soul_change_changes_prompt(profile: Path) -> None:
    """Editing SOUL.md changes the prompt text and its hash."""
    write(profile / "SOUL.md", "Persona one.")
    before = build_system_prompt(profile, None, [])
    write(profile / "SOUL.md", "Persona two.")
    after = build_system_prompt(profile, None, [])
    assert "Persona one." in before.text
    assert "Persona two." in after.text
    assert "Persona one." not in after.text
    assert before.sha256 != after.sha256


def test_empty_soul_contributes_nothing(profile: Path) -> None:
    """A blank SOUL.md adds no section and is not listed as a source."""
    write(profile / "SOUL.md", "\n  \n")
    built = build_system_prompt(profile, None, [])
    assert built.sources == []
    assert "## Soul" not in built.text


def test_skills_sorted_by_directory_with_front_matter(profile: Path) -> None:
    """Skills are ordered by directory name and headed by front-matter name and description."""
    write(profile / "skills" / "b-skill" / "SKILL.md", "---\nname: Zed\n---\nB body")
    write(
        profile / "skills" / "a-skill" / "SKILL.md",
        "---\nname: \"Quoted\"\ndescription: 'Says hi.'\nother: x\n---\n\nA body\n",
    )
    text = build_system_prompt(profile, None, []).text
    assert "## Skill: Quoted\n\nSays hi.\n\nA body" in text
    assert "## Skill: Zed\n\nB body" in text
    assert text.index("## Skill: Quoted") < text.index("## Skill: Zed")
    assert "other: x" not in text
    assert "---" not in text


def test_skill_without_front_matter_uses_directory_name(profile: Path) -> None:
    """A SKILL.md with no front-matter is headed by its directory name and kept whole."""
    write(profile / "skills" / "deploy" / "SKILL.md", "Run make deploy.\n")
    text = build_system_prompt(profile, None, []).text
    assert "## Skill: deploy\n\nRun make deploy." in text


def test_skill_dirs_without_skill_md_or_hidden_are_ignored(profile: Path) -> None:
    """Directories lacking SKILL.md, hidden directories and stray files add no skill."""
    (profile / "skills" / "empty").mkdir(parents=True)
    write(profile / "skills" / ".archive" / "SKILL.md", "old")
    write(profile / "skills" / "README.md", "not a skill")
    built = build_system_prompt(profile, None, [])
    assert "## Skill:" not in built.text
    assert built.sources == []


def test_skill_safety_present_iff_skill_manage(profile: Path) -> None:
    """The Skill Safety section appears exactly when skill_manage is among the tools."""
    with_it = build_system_prompt(profile, None, ["memory", "skill_manage"]).text
    without = build_system_prompt(profile, None, ["memory", "skill_view"]).text
    assert with_it.count(f"\n{SKILL_SAFETY_HEADING}\n") == 1
    assert SKILL_SAFETY_HEADING not in without


def test_tools_section_lists_sorted_unique_names(profile: Path) -> None:
    """The tools section lists every tool once, sorted, and says (none) for no tools."""
    text = build_system_prompt(profile, None, ["web_search", "memory", "web_search"]).text
    assert text.endswith("## Tools\n\nmemory, web_search\n")
    assert build_system_prompt(profile, None, []).text.endswith("## Tools\n\n(none)\n")


def test_tools_given_as_string_is_rejected(profile: Path) -> None:
    """Passing a bare string as the tool list is a ValidationError, not a list of letters."""
    with pytest.raises(ValidationError, match="tools must be a list"):
        build_system_prompt(profile, None, "memory")


def test_missing_profile_dir_is_rejected(tmp_path: Path) -> None:
    """A profile directory that does not exist raises ValidationError naming it."""
    missing = tmp_path / "nope"
    with pytest.raises(ValidationError, match="nope"):
        build_system_prompt(missing, None, [])


def test_project_files_nearest_first_in_name_order(profile: Path, repo: Path) -> None:
    """Project files are taken nearest directory first, and in the fixed name order within one."""
    workspace = repo / "src" / "app"
    write(workspace / ".cursorrules", "ws cursor")
    write(workspace / "AGENTS.md", "ws agents")
    write(workspace / ".hermes.md", "ws dot hermes")
    write(repo / "src" / "HERMES.md", "src hermes")
    write(repo / "CLAUDE.md", "root claude")
    built = build_system_prompt(profile, workspace, [])
    assert built.sources == [
        "AGENTS.md",
        ".hermes.md",
        ".cursorrules",
        "../HERMES.md",
        "../../CLAUDE.md",
    ]
    order = ["ws agents", "ws dot hermes", "ws cursor", "src hermes", "root claude"]
    positions = [built.text.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert "## Project Context: ../HERMES.md\n\nsrc hermes" in built.text


def test_workspace_walk_stops_at_git_root(tmp_path: Path, profile: Path, repo: Path) -> None:
    """Files above the git root are not read; the git root's own files are."""
    write(tmp_path / "AGENTS.md", "outside the repo")
    write(repo / "AGENTS.md", "inside the repo")
    text = build_system_prompt(profile, repo / "src" / "app", []).text
    assert "inside the repo" in text
    assert "outside the repo" not in text
    assert project_context_files(repo / "src" / "app") == [repo.resolve() / "AGENTS.md"]


def test_git_worktree_file_also_marks_root(tmp_path: Path, profile: Path) -> None:
    """A ``.git`` file (as in a git worktree) stops the walk like a ``.git`` directory."""
    write(tmp_path / "AGENTS.md", "outside")
    worktree = tmp_path / "wt"
    write(worktree / ".git", "gitdir: /elsewhere\n")
    write(worktree / "AGENTS.md", "worktree rules")
    text = build_system_prompt(profile, worktree, []).text
    assert "worktree rules" in text
    assert "outside" not in text


def test_walk_without_git_reaches_parents(tmp_path: Path, profile: Path) -> None:
    """Without a git root the walk continues past the workspace into its parents."""
    workspace = tmp_path / "plain" / "ws"
    workspace.mkdir(parents=True)
    write(tmp_path / "plain" / "AGENTS.md", "parent rules")
    built = build_system_prompt(profile, workspace, [])
    assert "parent rules" in built.text
    assert "../AGENTS.md" in built.sources


def test_no_workspace_or_missing_workspace_has_no_project_context(
    tmp_path: Path, profile: Path
) -> None:
    """A None workspace or one that does not exist contributes no project context."""
    write(tmp_path / "AGENTS.md", "should not appear")
    assert "## Project Context" not in build_system_prompt(profile, None, []).text
    missing = build_system_prompt(profile, tmp_path / "gone", []).text
    assert "## Project Context" not in missing
    assert project_context_files(tmp_path / "gone") == []


def test_long_project_file_truncated_with_note(profile: Path, repo: Path) -> None:
    """A project file longer than the limit keeps its first 20,000 chars plus a note."""
    body = "a" * PROJECT_FILE_MAX_CHARS + "TAIL-MARKER"
    write(repo / "AGENTS.md", body)
    text = build_system_prompt(profile, repo, []).text
    section = text.split("## Project Context: AGENTS.md\n\n", 1)[1].split("\n\n## ", 1)[0]
    kept, note = section.split("\n\n", 1)
    assert kept == "a" * PROJECT_FILE_MAX_CHARS
    assert "TAIL-MARKER" not in text
    assert note == (
        "[truncated: AGENTS.md has 20,011 characters; only the first 20,000 are included]"
    )


def test_project_file_at_limit_not_truncated(profile: Path, repo: Path) -> None:
    """A project file of exactly the limit is included whole with no truncation note."""
    write(repo / "AGENTS.md", "b" * PROJECT_FILE_MAX_CHARS)
    text = build_system_prompt(profile, repo, []).text
    assert "b" * PROJECT_FILE_MAX_CHARS in text
    assert "[truncated" not in text


def test_crlf_and_bom_normalised(profile: Path, repo: Path) -> None:
    """CRLF, lone CR and a UTF-8 BOM in sources give the same prompt as clean LF files."""
    write(profile / "SOUL.md", b"\xef\xbb\xbfLine one\r\nLine two\r\n")
    write(repo / "AGENTS.md", b"Rule A\rRule B\r\n")
    crlf = build_system_prompt(profile, repo, [])
    write(profile / "SOUL.md", "Line one\nLine two\n")
    write(repo / "AGENTS.md", "Rule A\nRule B\n")
    lf = build_system_prompt(profile, repo, [])
    assert "\r" not in crlf.text
    assert "\ufeff" not in crlf.text
    assert crlf.text == lf.text
    assert crlf.sha256 == lf.sha256


def test_invalid_utf8_source_names_the_file(profile: Path) -> None:
    """A source that is not UTF-8 raises ValidationError naming the file."""
    write(profile / "SOUL.md", b"bad \xff byte")
    with pytest.raises(ValidationError, match=r"SOUL\.md is not valid UTF-8"):
        build_system_prompt(profile, None, [])


def test_memory_blocks_prefer_memories_dir(profile: Path) -> None:
    """memories/MEMORY.md wins over a root MEMORY.md; root USER.md is used when alone."""
    write(profile / "memories" / "MEMORY.md", "from memories dir")
    write(profile / "MEMORY.md", "from profile root")
    write(profile / "USER.md", "user at root")
    built = build_system_prompt(profile, None, [])
    assert "## Memory\n\nfrom memories dir" in built.text
    assert "from profile root" not in built.text
    assert "## User Profile\n\nuser at root" in built.text
    assert built.sources == ["memories/MEMORY.md", "USER.md"]


def test_memory_update_changes_prompt(profile: Path) -> None:
    """Saving new memory changes the rebuilt prompt, as a refresh expects."""
    write(profile / "memories" / "MEMORY.md", "old fact")
    before = build_system_prompt(profile, None, ["memory"])
    write(profile / "memories" / "MEMORY.md", "old fact\nnew fact")
    after = build_system_prompt(profile, None, ["memory"])
    assert "new fact" in after.text
    assert before.sha256 != after.sha256


def test_split_front_matter_unclosed_block_is_body() -> None:
    """Front-matter that never closes is treated as ordinary body text."""
    text = "---\nname: x\nno closing"
    assert split_front_matter(text) == ({}, text)


def test_built_prompt_round_trips_through_msgspec(profile: Path) -> None:
    """A BuiltPrompt encodes to JSON and decodes back equal, so it can be stored."""
    write(profile / "SOUL.md", "persona")
    built = build_system_prompt(profile, None, ["memory"])
    decoded = msgspec.json.decode(msgspec.json.encode(built), type=BuiltPrompt)
    assert decoded == built
