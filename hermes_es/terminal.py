"""Per-terminal breadcrumbs, so a bare ``hermes -c`` resumes this terminal's own session.

Each terminal (tmux pane, screen window, kitty window, … or tty) gets a small JSON file under
``<profile dir>/breadcrumbs/<hash>.json`` naming the session last used there. Breadcrumbs are a
convenience: a missing, stale (older than 30 days) or corrupt file just means "no breadcrumb",
and the caller falls back to the most recent session.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import msgspec

from hermes_es.errors import ValidationError

BREADCRUMB_DIR = "breadcrumbs"
DEFAULT_MAX_AGE_DAYS = 30
_SECONDS_PER_DAY = 86400.0


class Breadcrumb(msgspec.Struct, frozen=True, kw_only=True):
    """What one terminal last resumed."""

    terminal_key: str
    """The raw terminal identity, checked on read so a hash collision is never trusted."""
    session_id: str
    """The session this terminal last used."""
    written_at: float
    """Unix time the breadcrumb was written."""


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(Breadcrumb)


def _env(environ: Mapping[str, str], name: str) -> str:
    """An environment value with surrounding blanks removed ("" when unset)."""
    return environ.get(name, "").strip()


def _multiplexer_key(environ: Mapping[str, str]) -> str | None:
    """tmux pane or screen window: checked first because they run inside terminal emulators."""
    pane = _env(environ, "TMUX_PANE")
    if pane:
        # $TMUX is "<socket>,<server pid>,<session>"; socket + pid tell tmux servers apart.
        server = ",".join(_env(environ, "TMUX").split(",")[:2])
        return f"tmux:{server}:{pane}"
    screen = _env(environ, "STY")
    if screen:
        return f"screen:{screen}:{_env(environ, 'WINDOW')}"
    return None


def _emulator_key(environ: Mapping[str, str]) -> str | None:
    """A terminal emulator's own window/pane/session id, when it exports one."""
    window = _env(environ, "KITTY_WINDOW_ID")
    if window:
        return f"kitty:{_env(environ, 'KITTY_PID')}:{window}"
    simple = (
        ("WEZTERM_PANE", "wezterm"),
        ("ITERM_SESSION_ID", "iterm"),
        ("TERM_SESSION_ID", "apple-terminal"),
        ("WT_SESSION", "windows-terminal"),
    )
    for name, label in simple:
        value = _env(environ, name)
        if value:
            return f"{label}:{value}"
    return None


def terminal_key(environ: Mapping[str, str], stdin_tty_name: str | None) -> str | None:
    """Identify the current terminal (multiplexer, then emulator, then tty); None if unknown."""
    key = _multiplexer_key(environ) or _emulator_key(environ)
    if key:
        return key
    if stdin_tty_name:
        return f"tty:{stdin_tty_name}"
    return None


def stdin_tty_name() -> str | None:
    """The device name of stdin's terminal (``os.ttyname(0)``), or None when not a tty."""
    try:
        return os.ttyname(0)
    except OSError:
        return None


def breadcrumb_path(home: Path, key: str) -> Path:
    """The file holding ``key``'s breadcrumb: a hash of the key, safe as a file name."""
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
    return home / BREADCRUMB_DIR / f"{digest}.json"


def write_breadcrumb(home: Path, key: str, session_id: str, now: float | None = None) -> bool:
    """Atomically record ``session_id`` for terminal ``key``; False if it could not be written."""
    if not key:
        raise ValidationError("terminal key must not be empty", subject=key)
    if not session_id:
        raise ValidationError("session id must not be empty", subject=session_id)
    crumb = Breadcrumb(
        terminal_key=key,
        session_id=session_id,
        written_at=time.time() if now is None else now,
    )
    target = breadcrumb_path(home, key)
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # mkstemp creates the file 0600 in the same directory, so os.replace is atomic.
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".json")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(_ENCODER.encode(crumb))
        os.replace(tmp_name, target)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        return False
    return True


def read_breadcrumb(
    home: Path,
    key: str,
    now: float | None = None,
    max_age_days: float = DEFAULT_MAX_AGE_DAYS,
) -> str | None:
    """The session id last used in terminal ``key``; None if absent, corrupt or stale."""
    try:
        data = breadcrumb_path(home, key).read_bytes()
        crumb = _DECODER.decode(data)
    except (OSError, msgspec.DecodeError):
        return None
    if crumb.terminal_key != key or not crumb.session_id:
        return None
    current = time.time() if now is None else now
    if current - crumb.written_at > max_age_days * _SECONDS_PER_DAY:
        return None
    return crumb.session_id
