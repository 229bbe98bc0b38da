"""The CLI opens no store itself: every command reaches it through the backend interface.

Issue 13 named the places that used to open SQLite directly (``store.db.open_db`` from
``cli/chat.py`` and ``cli/sessions_list.py``, ``projections.catalog.connect`` from
``cli/base.py``, rebuild and verify straight from ``cli/sessions_maint.py``); this checks every
module of ``hermes_es/cli`` for an import of a backend's own modules, at any depth (the lazy
imports inside functions included), and for SQL text.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[2] / "hermes_es" / "cli"

FORBIDDEN = (
    "hermes_es.store.db",
    "hermes_es.store.schema",
    "hermes_es.store.recorder",
    "hermes_es.store.persistence",
    "hermes_es.store.postgres",
    "hermes_es.projections",
    "psycopg",
    "eventsourcing",
)
"""Modules that open, lay out or write a store of one backend: the CLI goes through
``store.backend`` (``StoreBackend``) and the commands and queries instead."""

SQL = re.compile(r"\b(SELECT\s+\S.*\bFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b")


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _is_forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def _modules() -> list[Path]:
    return sorted(CLI.glob("*.py"))


def test_the_cli_has_modules_to_check() -> None:
    names = {p.name for p in _modules()}
    assert {"base.py", "chat.py", "sessions_list.py", "sessions_maint.py"} <= names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_cli_module_imports_no_backend_module(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    bad = [
        f"{path.name}:{line}: {module}" for line, module in _imports(tree) if _is_forbidden(module)
    ]
    assert bad == [], "the CLI must reach the store through store.backend: " + ", ".join(bad)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_cli_module_holds_no_sql(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    texts = [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    bad = [f"{path.name}:{line}" for line, text in texts if SQL.search(text)]
    assert bad == [], "SQL in the CLI: " + ", ".join(bad)


def test_the_checks_see_what_they_forbid() -> None:
    """The two checks find the kinds of line they exist to refuse."""
    source = (
        "def f():\n"
        "    from hermes_es.store.db import open_db\n"
        "    import hermes_es.projections.catalog as catalog\n"
        "    return 'SELECT id FROM sessions'\n"
    )
    tree = ast.parse(source)
    assert [m for _, m in _imports(tree) if _is_forbidden(m)] == [
        "hermes_es.store.db",
        "hermes_es.store.db.open_db",
        "hermes_es.projections.catalog",
    ]
    assert SQL.search("SELECT id FROM sessions")
    assert not SQL.search("Select a session from the list")
