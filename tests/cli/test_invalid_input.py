"""Invalid text is an error, not a traceback: invalid UTF-8 from argv, stdin and the interactive
prompt, lone surrogates through the API, out-of-range integers, trailing newlines in tags,
over-long references, unopenable stores and over-size messages. Nothing is written."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import apsw
import pexpect
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import HermesError, StoreError, ValidationError
from hermes_es.queries.resolve import resolve_session

ENTRY = "from hermes_es.cli import main; main()"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    env.update({"HERMES_HOME": str(home), "COLUMNS": "200", "NO_COLOR": "1"})
    return env


def hermes(home: Path, *args: str | bytes, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    """Run the real ``hermes`` program with raw argv (bytes allowed) and stdin."""
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        env=_env(home),
        cwd=home,
        input=stdin,
        capture_output=True,
        timeout=60,
    )  # type: ignore[call-overload,no-any-return]


def _text(out: bytes) -> str:
    return out.decode("utf-8", "replace")


def _sessions(home: Path) -> int:
    if not (home / "state.db").exists():
        return 0
    conn = apsw.Connection(str(home / "state.db"))
    try:
        return int(conn.execute("SELECT COUNT(*) FROM events").fetchall()[0][0])
    finally:
        conn.close()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A HERMES_HOME with one session."""
    with SessionEngine.open(tmp_path) as engine:
        sid = engine.start_session("cli", session_id="20250101_000000_abcdef", title="kept")
        engine.append_message(sid, "user", "hello there")
    return tmp_path


@pytest.mark.parametrize(
    "args",
    [
        (b"sessions", b"show", b"ab\xffcd"),
        (b"-q", b"ab\xffcd"),
        (b"sessions", b"rename", b"20250101_000000_abcdef", b"caf\xe9"),
        (b"sessions", b"search", b"\xe9t\xe9"),
    ],
    ids=["show", "query", "rename", "search"],
)
def test_invalid_utf8_argument_is_a_usage_error(home: Path, args: tuple[bytes, ...]) -> None:
    """An argument with invalid UTF-8 bytes: exit 2, ``Error:`` naming it (bad byte shown as
    ``\\xff``), no traceback, and nothing written."""
    before = _sessions(home)
    result = hermes(home, *args)
    err = _text(result.stderr)
    assert result.returncode == 2, err
    assert err.startswith("Error: argument '") and "is not valid UTF-8" in err
    assert "\\x" in err and "Traceback" not in err
    assert _sessions(home) == before


def test_invalid_utf8_on_stdin_is_refused(tmp_path: Path) -> None:
    """A one-shot message piped in with a lone 0xE9 byte: exit 1, clear error, no session."""
    result = hermes(tmp_path, "-Q", stdin=b"caf\xe9 au lait\n")
    err = _text(result.stderr)
    assert result.returncode == 1, err
    assert "not valid UTF-8" in err and "0xe9" in err and "Traceback" not in err
    assert _sessions(tmp_path) == 0


def test_lone_e9_at_the_interactive_prompt_is_refused(home: Path) -> None:
    """Typing a lone 0xE9 byte at the prompt prints an error, sends nothing, and the chat goes
    on: the next (valid) message is sent and recorded."""
    seen = io.BytesIO()
    child = pexpect.spawn(
        sys.executable,
        ["-c", ENTRY, "--resume", "kept", "--no-restore-cwd"],
        env=_env(home),
        cwd=str(home),
        timeout=60,
        dimensions=(50, 200),
    )
    child.logfile_read = seen
    child.expect(rb"hermes> ")
    child.send(b"caf\xe9\r")
    child.expect(rb"not valid UTF-8")
    child.expect(rb"hermes> ")
    child.sendline(b"plain words")
    child.expect(rb"plain words")
    child.expect(rb"hermes> ")
    child.sendline(b"/exit")
    child.expect(pexpect.EOF)
    child.close()
    out = _text(seen.getvalue())
    assert child.exitstatus == 0, out
    assert "Traceback" not in out
    with SessionEngine.open(home) as engine:
        state = engine.get("20250101_000000_abcdef")
    assert state.message_count == 3  # hello there, plain words, the reply


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda e, s: e.append_message(s, "user", "bad \ud800 text"), "content"),
        (lambda e, s: e.append_message(s, "assistant", "ok", reasoning="\udcff"), "reasoning"),
        (
            lambda e, s: e.append_message(
                s, "assistant", "", tool_calls=[{"id": "c", "name": "gr\udce9p"}]
            ),
            "name",
        ),
        (lambda e, s: e.set_title(s, "t\udcff"), "title"),
        (lambda e, s: e.change_workspace(s, "/tmp/\udcff"), "cwd"),
        (lambda e, s: e.start_session("cli", model="m\ud800"), "model"),
        (lambda e, s: e.start_session("cli", model_config={"k": "\ud800"}), "model_config"),
        (lambda e, s: e.record_usage(s, 1, 1, model="\udcff"), "model"),
    ],
    ids=["content", "reasoning", "tool-name", "title", "cwd", "model", "config", "usage"],
)
def test_lone_surrogates_through_the_api_are_validation_errors(
    tmp_path: Path, call: object, field: str
) -> None:
    """A lone surrogate anywhere in what the API stores is a ValidationError naming the field;
    the log is unchanged."""
    with SessionEngine.open(tmp_path) as engine:
        sid = engine.start_session("cli")
        before = _sessions(tmp_path)
        with pytest.raises(ValidationError, match=f"{field}.* is not valid Unicode"):
            call(engine, sid)  # type: ignore[operator]
        assert _sessions(tmp_path) == before


@pytest.mark.parametrize(
    "args",
    [
        ("sessions", "list", "--limit", "9223372036854775808"),
        ("sessions", "search", "hello", "--limit", "9223372036854775808"),
        ("sessions", "show", "kept", "--as-of", "9223372036854775808"),
        ("sessions", "show", "kept", "--as-of", "0"),
        ("sessions", "prune", "--min-messages", "99999999999999999999", "--dry-run"),
        ("sessions", "list", "--limit", "-1"),
    ],
    ids=["list", "search", "as-of-big", "as-of-0", "prune", "negative"],
)
def test_integer_options_out_of_range_are_usage_errors(home: Path, args: tuple[str, ...]) -> None:
    """Integers beyond what SQLite stores, zero versions and negative limits: exit 2 naming the
    option, no traceback."""
    result = hermes(home, *args)
    err = _text(result.stderr)
    assert result.returncode == 2, err
    assert f"Invalid value for '{args[-2] if args[-1] != '--dry-run' else args[-3]}'" in err
    assert "Traceback" not in err


def test_source_with_a_trailing_newline_is_refused(tmp_path: Path) -> None:
    """``--source $'cli\\n'`` is not the tag ``cli``: refused, and no session is started."""
    result = hermes(tmp_path, "-q", "hello", "--source", "cli\n")
    err = _text(result.stderr)
    assert result.returncode == 1, err
    assert "invalid source tag" in err
    assert _sessions(tmp_path) == 0
    with SessionEngine.open(tmp_path) as engine, pytest.raises(ValidationError):
        engine.start_session("cli\n")


def test_over_long_reference_is_refused_before_sql(tmp_path: Path) -> None:
    """A reference longer than any id or title is refused without running a query (a closed
    connection proves no SQL ran), and the CLI says so with exit 1."""
    conn = apsw.Connection(str(tmp_path / "x.db"))
    conn.close()
    with pytest.raises(ValidationError, match="longer than any session id or title"):
        resolve_session(conn, "x" * 5000)
    with SessionEngine.open(tmp_path) as engine:
        engine.start_session("cli")
    result = hermes(tmp_path, "sessions", "show", "y" * 100_000)
    err = _text(result.stderr)
    assert result.returncode == 1 and "longer than any session id or title" in err
    assert len(err) < 500


@pytest.mark.parametrize(
    "target",
    ["not-a-db/state.db/inside.db", "not-a-db/state.db", "a-dir.db", "nul\0byte", "bad\udcff"],
    ids=["under-a-file", "not-a-db", "directory", "nul", "surrogate"],
)
def test_engine_open_raises_only_hermes_errors(tmp_path: Path, target: str) -> None:
    """Whatever is wrong with the path, SessionEngine.open raises a HermesError subclass."""
    (tmp_path / "not-a-db").mkdir()
    (tmp_path / "not-a-db" / "state.db").write_bytes(b"this is not sqlite" * 100)
    (tmp_path / "a-dir.db").mkdir()
    with pytest.raises(HermesError) as caught:
        SessionEngine.open(str(tmp_path / target))
    assert isinstance(caught.value, StoreError | ValidationError)
    assert caught.value.message


def test_engine_open_refuses_unknown_home_user() -> None:
    """``~nosuchuser/...`` cannot be expanded: a ValidationError, not a RuntimeError."""
    with pytest.raises(HermesError):
        SessionEngine.open("~no_such_user_hermes_test/x.db")


def test_message_size_limit_is_enforced_and_configurable(tmp_path: Path) -> None:
    """A message over max_message_bytes is refused with the size and the limit named; nothing
    is written; 0 turns the limit off."""
    with SessionEngine.open(tmp_path, max_message_bytes=1000) as engine:
        sid = engine.start_session("cli")
        before = _sessions(tmp_path)
        engine.append_message(sid, "user", "é" * 500)  # exactly 1000 bytes
        with pytest.raises(ValidationError, match=r"1,001 bytes; the limit is 1,000 bytes"):
            engine.append_message(sid, "tool_output_is_not_a_role" and "user", "x" * 1001)
        with pytest.raises(ValidationError, match="limit is 1,000"):
            engine.append_message(
                sid, "assistant", "", tool_calls=[{"id": "c", "name": "t", "arguments": "a" * 1000}]
            )
        assert _sessions(tmp_path) == before + 1
    with SessionEngine.open(tmp_path, max_message_bytes=0) as engine:
        engine.append_message(sid, "user", "x" * 5_000_000)


def test_message_size_limit_from_config_in_the_cli(tmp_path: Path) -> None:
    """``sessions.max_message_bytes`` in config.yaml limits what a chat records: a clear
    ``Error:`` naming the key, exit 1, and no message stored."""
    (tmp_path / "config.yaml").write_text("sessions:\n  max_message_bytes: 100\n")
    result = hermes(tmp_path, "-Q", "-q", "x" * 200)
    err = _text(result.stderr)
    assert result.returncode == 1, err
    assert "200 bytes; the limit is 100 bytes" in err and "sessions.max_message_bytes" in err
    conn = apsw.Connection(str(tmp_path / "state.db"))
    try:
        assert conn.execute("SELECT COUNT(*) FROM message_rows").fetchall()[0][0] == 0
    finally:
        conn.close()
