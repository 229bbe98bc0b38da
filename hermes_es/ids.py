"""Session ids: ``YYYYMMDD_HHMMSS_<hex>``, 6 hex for local CLI/TUI sessions, 8 for gateway ones."""

from __future__ import annotations

import re
import secrets
import time

LOCAL_SOURCES = frozenset({"cli", "tui", "oneshot", "desktop"})
"""Sources whose sessions get the short (6 hex) suffix."""

SESSION_ID_RE = re.compile(r"^\d{8}_\d{6}_[0-9a-f]{6}([0-9a-f]{2})?$")


def new_session_id(source: str, now: float | None = None) -> str:
    """A fresh session id for ``source`` at local time ``now``."""
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(time.time() if now is None else now))
    width = 6 if source in LOCAL_SOURCES else 8
    return f"{stamp}_{secrets.token_hex(4)[:width]}"


def looks_like_session_id(text: str) -> bool:
    """True when ``text`` has the shape of a full session id."""
    return SESSION_ID_RE.match(text) is not None
