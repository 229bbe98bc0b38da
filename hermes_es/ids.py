"""Session ids: ``YYYYMMDD_HHMMSS_<hex>``, 6 hex for local CLI/TUI sessions, 8 for gateway ones."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable

LOCAL_SOURCES = frozenset({"cli", "tui", "oneshot", "desktop"})
"""Sources whose sessions get the short (6 hex) suffix."""

SESSION_ID_RE = re.compile(r"\d{8}_\d{6}_[0-9a-f]{6}([0-9a-f]{2})?")

MAX_ATTEMPTS = 64
"""Fresh suffixes tried before giving up: with 16.7 million 6-hex suffixes per second, 64
taken in a row means millions of sessions started in that one second."""


def new_session_id(source: str, now: float | None = None) -> str:
    """A fresh session id for ``source`` at local time ``now``."""
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(time.time() if now is None else now))
    width = 6 if source in LOCAL_SOURCES else 8
    return f"{stamp}_{secrets.token_hex(4)[:width]}"


def unused_session_id(source: str, now: float, taken: Callable[[str], bool]) -> str:
    """A fresh session id for ``source`` that ``taken`` says is free: a suffix already in use
    in the same second is replaced by another fresh one (never an error, never a reuse).

    Raises ``RuntimeError`` only if ``MAX_ATTEMPTS`` fresh suffixes in a row were taken.
    """
    for _ in range(MAX_ATTEMPTS):
        sid = new_session_id(source, now)
        if not taken(sid):
            return sid
    raise RuntimeError(f"no free session id after {MAX_ATTEMPTS} fresh suffixes")


def looks_like_session_id(text: str) -> bool:
    """True when ``text`` has the shape of a full session id (the whole text, no newline)."""
    return SESSION_ID_RE.fullmatch(text) is not None
