"""Safe export file names: derived from ids and titles, never able to leave the output folder."""

from __future__ import annotations

import hashlib
import re
import unicodedata

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_STEM = 120
WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "CLOCK$"}
    | {f"{dev}{n}" for dev in ("COM", "LPT") for n in "0123456789"}
)
"""Device names Windows reserves with any extension (``nul.md`` is the null device there)."""


def slug(text: str, limit: int = 60) -> str:
    """Letters, digits, ``.``, ``_`` and ``-`` only; no leading dots; at most ``limit`` chars."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    cleaned = _UNSAFE.sub("-", ascii_text).strip("-._")
    return cleaned[:limit].strip("-._")


def file_stem(session_id: str, title: str = "") -> str:
    """``<id>[-<title>]`` made safe; an id that needed changing gets a short hash suffix."""
    stem = slug(session_id, 80) or "session"
    if stem != session_id:
        stem += "-" + hashlib.sha256(session_id.encode()).hexdigest()[:8]
    title_part = slug(title, 40)
    if title_part:
        stem += "-" + title_part
    return safe_stem(stem[:MAX_STEM].rstrip(".-"))


def safe_stem(stem: str) -> str:
    """``stem`` with a leading ``_`` when Windows would read it as a device (``CON``, ``nul.x``)."""
    base = stem.split(".", 1)[0].rstrip(" ").upper()
    return f"_{stem}" if base in WINDOWS_RESERVED else stem


def unique_names(stems: list[str], extension: str) -> list[str]:
    """File names for the stems, made unique (case-insensitively) within one export."""
    seen: set[str] = set()
    out: list[str] = []
    for stem in stems:
        stem = safe_stem(stem)
        name = f"{stem}{extension}"
        n = 2
        while name.lower() in seen or name.lower() == "manifest.jsonl":
            name = f"{stem}-{n}{extension}"
            n += 1
        seen.add(name.lower())
        out.append(name)
    return out
