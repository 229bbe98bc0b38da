"""No pattern in the package ends in a bare ``$``: Python's ``$`` also matches before a trailing
newline, so ``--source $'cli\\n'`` once passed as ``cli``. Patterns use ``\\Z`` or
``fullmatch`` instead (``re.MULTILINE`` patterns, where ``$`` means end of line, are fine)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import hermes_es

PACKAGE = Path(hermes_es.__file__).parent
LINE_BASED = {"export/markdown_safe.py"}
"""Modules that match one already-split line at a time (no newline can be inside)."""


def _dollar_patterns(path: Path, root: Path = PACKAGE) -> list[str]:
    """``re.compile`` patterns in ``path`` that end in an unescaped ``$`` without MULTILINE."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "compile"):
            continue
        if not node.args or not isinstance(node.args[0], ast.Constant):
            continue
        pattern = node.args[0].value
        flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
        flags += " ".join(ast.unparse(k.value) for k in node.keywords)
        if not isinstance(pattern, str) or re.search(r"\bre\.(M|MULTILINE)\b", flags):
            continue
        for alternative in pattern.split("|"):
            if alternative.endswith("$") and not alternative.endswith("\\$"):
                found.append(f"{path.relative_to(root)}: {pattern!r}")
                break
    return found


def test_no_pattern_ends_in_a_bare_dollar() -> None:
    """Every compiled pattern anchors its end with ``\\Z`` (or is matched with fullmatch)."""
    offenders = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in LINE_BASED
        for hit in _dollar_patterns(path)
    ]
    assert offenders == []


def test_the_check_catches_a_bare_dollar(tmp_path: Path) -> None:
    """The scan itself flags ``^x$`` and passes ``^x\\Z``, ``\\$`` and MULTILINE patterns."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import re\n"
        "A = re.compile(r'^[a-z]+$')\n"
        "B = re.compile(r'^[a-z]+\\Z')\n"
        "C = re.compile(r'cost \\$')\n"
        "D = re.compile(r'^x$', re.M)\n"
    )
    assert _dollar_patterns(sample, tmp_path) == ["sample.py: '^[a-z]+$'"]
