"""Workspace keys: the git repository root of a directory, else the directory itself."""

from __future__ import annotations

import os
from pathlib import Path


def workspace_key(cwd: str | Path) -> str:
    """The git repo root containing ``cwd`` (a ``.git`` dir or file), else ``cwd`` resolved."""
    path = Path(os.path.abspath(os.path.expanduser(str(cwd))))
    for candidate in (path, *path.parents):
        if (candidate / ".git").exists():
            return str(candidate)
    return str(path)
