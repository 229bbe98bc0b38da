"""The built-in tools: the two offline text tools and read-only views of the workspace and store.

- ``echo`` and ``word_count``: pure functions of their ``text`` argument (the offline responder
  calls them, so ``make demo`` and the tests exercise the tool loop with no network).
- ``read_file``, ``list_directory``, ``search_files``: read files under the session's workspace
  (its ``cwd``). A path is resolved (symlinks followed) and refused when it lands outside the
  workspace; output is capped so one call cannot flood the context.
- ``session_search``: full-text search over the session store (what the ``session_search``
  tool of the core toolset promises).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hermes_es.tools.registry import Tool, ToolContext, ToolError, register

MAX_READ_BYTES = 64 * 1024
"""Most bytes ``read_file`` returns in one call (ask again with ``offset``)."""
MAX_LIST_ENTRIES = 500
"""Most entries ``list_directory`` returns."""
MAX_MATCHES = 100
"""Most matching lines ``search_files`` returns."""
MAX_SEARCH_FILE_BYTES = 1024 * 1024
"""Files larger than this are skipped by ``search_files``."""
MAX_SEARCH_FILES = 5000
"""Most files ``search_files`` opens in one call."""
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv"})


def _text(arguments: dict[str, Any], key: str, *, required: bool = True, default: str = "") -> str:
    value = arguments.get(key)
    if value is None:
        if required:
            raise ToolError(f"missing required argument {key!r}")
        return default
    if not isinstance(value, str):
        raise ToolError(f"argument {key!r} must be a string, got {type(value).__name__}")
    return value


def _int(arguments: dict[str, Any], key: str, default: int, *, low: int, high: int) -> int:
    value = arguments.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError(f"argument {key!r} must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise ToolError(f"argument {key!r} must be between {low} and {high}, got {value}")
    return value


def _root(context: ToolContext) -> Path:
    if context.workspace is None:
        raise ToolError("this session has no workspace directory")
    return context.workspace.resolve()


def _inside(context: ToolContext, raw: str) -> tuple[Path, Path]:
    """(workspace root, resolved target); refuses paths that leave the workspace."""
    root = _root(context)
    if "\x00" in raw:
        raise ToolError("path contains a NUL byte")
    target = (root / Path(raw).expanduser()).resolve() if raw else root
    if target != root and root not in target.parents:
        raise ToolError(f"path {raw!r} is outside the workspace {root}")
    return root, target


def _shown(root: Path, path: Path) -> str:
    return "." if path == root else str(path.relative_to(root))


def _echo(arguments: dict[str, Any], _: ToolContext) -> str:
    return _text(arguments, "text", required=False)


def _word_count(arguments: dict[str, Any], _: ToolContext) -> str:
    return str(len(_text(arguments, "text", required=False).split()))


def _read_file(arguments: dict[str, Any], context: ToolContext) -> str:
    root, target = _inside(context, _text(arguments, "path"))
    offset = _int(arguments, "offset", 0, low=0, high=2**62)
    if not target.is_file():
        what = "a directory" if target.is_dir() else "not found"
        raise ToolError(f"{_shown(root, target)}: {what}")
    with target.open("rb") as handle:
        handle.seek(offset)
        data = handle.read(MAX_READ_BYTES + 1)
    if b"\x00" in data[:8192]:
        raise ToolError(f"{_shown(root, target)}: binary file ({target.stat().st_size} bytes)")
    more = len(data) > MAX_READ_BYTES
    text = data[:MAX_READ_BYTES].decode("utf-8", errors="replace")
    if more:
        text += (
            f"\n…(truncated at {MAX_READ_BYTES} bytes; call again with offset "
            f"{offset + MAX_READ_BYTES})"
        )
    return text


def _list_directory(arguments: dict[str, Any], context: ToolContext) -> str:
    root, target = _inside(context, _text(arguments, "path", required=False, default="."))
    if not target.is_dir():
        raise ToolError(f"{_shown(root, target)}: not a directory")
    entries = sorted(target.iterdir(), key=lambda p: p.name)
    lines = []
    for entry in entries[:MAX_LIST_ENTRIES]:
        if entry.is_symlink():
            lines.append(f"{entry.name}@")
        elif entry.is_dir():
            lines.append(f"{entry.name}/")
        else:
            lines.append(f"{entry.name}  {entry.stat().st_size}")
    if len(entries) > MAX_LIST_ENTRIES:
        lines.append(f"…({len(entries) - MAX_LIST_ENTRIES} more entries)")
    return "\n".join(lines) if lines else "(empty directory)"


def _search_files(arguments: dict[str, Any], context: ToolContext) -> str:
    pattern = _text(arguments, "pattern")
    if not pattern:
        raise ToolError("argument 'pattern' must not be empty")
    root, target = _inside(context, _text(arguments, "path", required=False, default="."))
    needle = pattern.casefold()
    found: list[str] = []
    opened = 0
    for directory, dirs, files in os.walk(target):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            path = Path(directory) / name
            if path.is_symlink() or opened >= MAX_SEARCH_FILES:
                continue
            try:
                if path.stat().st_size > MAX_SEARCH_FILE_BYTES:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            opened += 1
            if b"\x00" in data[:8192]:
                continue
            text = data.decode("utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), 1):
                if needle in line.casefold():
                    found.append(f"{_shown(root, path)}:{number}: {line.strip()[:200]}")
                    if len(found) >= MAX_MATCHES:
                        found.append(f"…(stopped at {MAX_MATCHES} matches)")
                        return "\n".join(found)
    return "\n".join(found) if found else f"no match for {pattern!r}"


def _session_search(arguments: dict[str, Any], context: ToolContext) -> str:
    query = _text(arguments, "query")
    limit = _int(arguments, "limit", 10, low=1, high=50)
    if context.search is None:
        raise ToolError("session search is not available here")
    hits = context.search(query, limit)
    return "\n".join(hits) if hits else f"no session matches {query!r}"


_TEXT_ARG = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "The input text."}},
    "required": ["text"],
}

register(
    Tool(name="echo", description="Return the text unchanged.", parameters=_TEXT_ARG, run=_echo)
)
register(
    Tool(
        name="word_count",
        description="Count the whitespace-separated words of the text.",
        parameters=_TEXT_ARG,
        run=_word_count,
    )
)
register(
    Tool(
        name="read_file",
        description=(
            f"Read a text file inside the workspace (at most {MAX_READ_BYTES} bytes per call; "
            "pass offset to continue)."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path relative to the workspace."},
                "offset": {"type": "integer", "description": "Byte offset to start at."},
            },
            "required": ["path"],
        },
        run=_read_file,
    )
)
register(
    Tool(
        name="list_directory",
        description="List a directory inside the workspace (name/ for directories, sizes).",
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory relative to the workspace."}
            },
        },
        run=_list_directory,
    )
)
register(
    Tool(
        name="search_files",
        description="Find lines containing a text (case-insensitive) in workspace files.",
        parameters={
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Text to look for."},
                "path": {"type": "string", "description": "Directory to search in."},
            },
            "required": ["pattern"],
        },
        run=_search_files,
    )
)
register(
    Tool(
        name="session_search",
        description="Full-text search over past conversations in this session store.",
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to search for."},
                "limit": {"type": "integer", "description": "Most hits (1-50)."},
            },
            "required": ["query"],
        },
        run=_session_search,
    )
)
