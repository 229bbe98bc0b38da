"""Tests for hermes_es.terminal: terminal identity and per-terminal breadcrumbs."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_es.errors import ValidationError
from hermes_es.terminal import (
    breadcrumb_path,
    read_breadcrumb,
    terminal_key,
    write_breadcrumb,
)

DAY = 86400.0
T0 = 1_750_000_000.0


@pytest.mark.parametrize(
    ("environ", "prefix"),
    [
        ({"TMUX": "/tmp/tmux-1/default,42,0", "TMUX_PANE": "%3"}, "tmux:"),
        ({"STY": "1234.pts-0.host", "WINDOW": "2"}, "screen:"),
        ({"KITTY_WINDOW_ID": "7", "KITTY_PID": "99"}, "kitty:"),
        ({"WEZTERM_PANE": "4"}, "wezterm:"),
        ({"ITERM_SESSION_ID": "w0t1p0:ABC"}, "iterm:"),
        ({"TERM_SESSION_ID": "5E1F"}, "apple-terminal:"),
        ({"WT_SESSION": "guid-1"}, "windows-terminal:"),
    ],
)
def test_each_terminal_kind_is_recognised(environ: dict[str, str], prefix: str) -> None:
    """Every supported terminal variable yields a key of its own kind, ahead of the tty."""
    key = terminal_key(environ, "/dev/pts/9")
    assert key is not None and key.startswith(prefix)


def test_tty_is_the_last_resort() -> None:
    """With no terminal variables the tty device names the terminal; with no tty, None."""
    assert terminal_key({}, "/dev/pts/3") == "tty:/dev/pts/3"
    assert terminal_key({"TERM": "xterm"}, None) is None
    assert terminal_key({"KITTY_WINDOW_ID": "  "}, None) is None


def test_multiplexer_beats_the_emulator_it_runs_in() -> None:
    """Two tmux panes inside one kitty window are two terminals."""
    base = {"KITTY_WINDOW_ID": "1", "TMUX": "/tmp/tmux-1/default,42,0"}
    left = terminal_key({**base, "TMUX_PANE": "%1"}, None)
    right = terminal_key({**base, "TMUX_PANE": "%2"}, None)
    assert left != right
    assert left is not None and left.startswith("tmux:")


def test_tmux_panes_of_different_servers_differ() -> None:
    """Pane %0 on two tmux servers (different sockets) are different terminals."""
    a = terminal_key({"TMUX": "/tmp/tmux-1/default,42,0", "TMUX_PANE": "%0"}, None)
    b = terminal_key({"TMUX": "/tmp/tmux-1/work,43,0", "TMUX_PANE": "%0"}, None)
    assert a != b


def test_two_terminals_resume_their_own_sessions(tmp_path: Path) -> None:
    """Breadcrumbs written from two terminals come back per terminal."""
    left = terminal_key({"TMUX": "/tmp/t,1,0", "TMUX_PANE": "%1"}, None)
    right = terminal_key({"TMUX": "/tmp/t,1,0", "TMUX_PANE": "%2"}, None)
    assert left is not None and right is not None
    assert write_breadcrumb(tmp_path, left, "20250101_000000_aaaaaa", now=T0)
    assert write_breadcrumb(tmp_path, right, "20250101_000000_bbbbbb", now=T0)
    assert read_breadcrumb(tmp_path, left, now=T0 + 60) == "20250101_000000_aaaaaa"
    assert read_breadcrumb(tmp_path, right, now=T0 + 60) == "20250101_000000_bbbbbb"
    assert read_breadcrumb(tmp_path, "tty:/dev/pts/77", now=T0) is None


def test_rewriting_a_breadcrumb_replaces_it(tmp_path: Path) -> None:
    """The latest session written for a terminal wins, and no temp files are left behind."""
    write_breadcrumb(tmp_path, "tty:/dev/pts/1", "first", now=T0)
    write_breadcrumb(tmp_path, "tty:/dev/pts/1", "second", now=T0 + 1)
    assert read_breadcrumb(tmp_path, "tty:/dev/pts/1", now=T0 + 2) == "second"
    assert [p.name for p in (tmp_path / "breadcrumbs").iterdir()] == [
        breadcrumb_path(tmp_path, "tty:/dev/pts/1").name
    ]


def test_breadcrumb_file_is_private_and_safely_named(tmp_path: Path) -> None:
    """The breadcrumb is 0600 and its file name is a hex hash, whatever the key contains."""
    key = "iterm:w0t0p0:../../etc/passwd"
    write_breadcrumb(tmp_path, key, "s1", now=T0)
    path = breadcrumb_path(tmp_path, key)
    assert path.parent == tmp_path / "breadcrumbs"
    assert path.stem.isalnum() and len(path.stem) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_stale_breadcrumb_is_ignored(tmp_path: Path) -> None:
    """After 30 days a breadcrumb no longer counts; at 29 days it still does."""
    write_breadcrumb(tmp_path, "tty:/dev/pts/2", "old-session", now=T0)
    assert read_breadcrumb(tmp_path, "tty:/dev/pts/2", now=T0 + 29 * DAY) == "old-session"
    assert read_breadcrumb(tmp_path, "tty:/dev/pts/2", now=T0 + 31 * DAY) is None
    assert read_breadcrumb(tmp_path, "tty:/dev/pts/2", now=T0 + 31 * DAY, max_age_days=60) == (
        "old-session"
    )


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b'{"terminal_key": "tty:/dev/pts/5", "session_id": 3, "written_at": 1}',
        b'{"session_id": "s"}',
        b'{"terminal_key": "tty:/dev/pts/OTHER", "session_id": "s", "written_at": 1.0}',
        b"\xff\xfe\x00",
    ],
)
def test_corrupt_breadcrumb_is_treated_as_absent(tmp_path: Path, content: bytes) -> None:
    """Unparseable, mistyped or mismatched breadcrumb files read as no breadcrumb."""
    path = breadcrumb_path(tmp_path, "tty:/dev/pts/5")
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert read_breadcrumb(tmp_path, "tty:/dev/pts/5", now=T0) is None


def test_write_reports_failure_instead_of_raising(tmp_path: Path) -> None:
    """When the breadcrumbs directory cannot be created, write returns False."""
    (tmp_path / "breadcrumbs").write_text("a file, not a directory")
    assert write_breadcrumb(tmp_path, "tty:/dev/pts/1", "s1", now=T0) is False


def test_empty_session_id_is_refused(tmp_path: Path) -> None:
    """An empty session id is a ValidationError, not a silent breadcrumb."""
    with pytest.raises(ValidationError, match="session id must not be empty"):
        write_breadcrumb(tmp_path, "tty:/dev/pts/1", "", now=T0)


def test_breadcrumb_written_by_another_process_is_read(tmp_path: Path) -> None:
    """A breadcrumb written by a separate hermes process (real clock) is read back here."""
    code = (
        "import sys; from pathlib import Path; from hermes_es.terminal import write_breadcrumb; "
        "sys.exit(0 if write_breadcrumb(Path(sys.argv[1]), 'kitty:1:2', 'from-child') else 1)"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=dict(os.environ))
    assert read_breadcrumb(tmp_path, "kitty:1:2") == "from-child"
