"""Stored text cannot hijack the terminal: every human-readable output, captured on a real
pseudo-terminal, shows control characters as visible text and never interprets rich markup.

The store is filled through the public API with an escape payload in every stored field a user,
a model or a tool controls (message content, reasoning, tool names, arguments and output, cwd and
workspace, model names, titles); then ``sessions list``, ``show``, ``search``, ``history``, the
resume recap, ``doctor``, error lines and the chat reply are run under a pty and their raw bytes
checked. ``--json`` keeps the text exact.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.terminal_text import clean, one_line, table, width

ENTRY = "from hermes_es.cli import main; main()"

OSC_TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
C1_CSI = "\x9b2J"
OVERWRITE = "fake\rreal"
BIDI = "\u202eevil"
MARKUP = "[bold red]MARKUP[/] :thumbs_up:"
PAYLOAD = f"deploy {OSC_TITLE}{CLEAR}{C1_CSI} {OVERWRITE} {BIDI} {MARKUP}\nsecond line"
"""One payload with every kind of hijack: an OSC retitle, a screen clear, a one-byte C1 CSI,
a carriage-return overwrite, a right-to-left override and rich markup (and a newline)."""

TITLE = "deploy [bold red]MARKUP[/] :thumbs_up:"
"""Titles refuse control characters when written, but markup must still show as typed."""

SID = "20250101_000000_abcdef"

# Our own styling (SGR colours, bold) and rich's cursor show/hide are the only escape
# sequences allowed in human output.
_OWN_SEQUENCE = re.compile("\x1b\\[[0-9;]*m|\x1b\\[\\?25[lh]")
_HOSTILE = re.compile("\x1b.{0,8}|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", re.S)


def assert_safe(output: bytes) -> str:
    """Assert that ``output`` (valid UTF-8) holds no escape sequence or control character we
    did not emit ourselves; return it decoded."""
    text = output.decode("utf-8")
    rest = _OWN_SEQUENCE.sub("", text).replace("\r\n", "\n")
    assert _HOSTILE.findall(rest) == [], text
    return text


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A HERMES_HOME with one session carrying the payload in every stored field."""
    home = tmp_path / "home"
    home.mkdir()
    with SessionEngine.open(home, clock=lambda: 1_700_000_000.0, actor=f"test{CLEAR}") as engine:
        engine.start_session(
            "cli",
            session_id=SID,
            title=TITLE,
            model=f"gpt{OSC_TITLE}",
            cwd=f"/tmp/work{OSC_TITLE}{CLEAR}\nnext",
        )
        engine.append_message(SID, "user", PAYLOAD)
        engine.append_message(
            SID,
            "assistant",
            PAYLOAD,
            reasoning=PAYLOAD,
            tool_calls=[{"id": f"c1{CLEAR}", "name": f"grep{OSC_TITLE}", "arguments": PAYLOAD}],
        )
        engine.append_message(
            SID, "tool", PAYLOAD, tool_call_id=f"c1{CLEAR}", tool_name=f"grep{OSC_TITLE}"
        )
        engine.record_usage(SID, 1, 2, model=f"gpt{OSC_TITLE}{C1_CSI}")
    return home


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    env.update({"HERMES_HOME": str(home), "COLUMNS": "200", "TERM": "xterm-256color"})
    env.pop("NO_COLOR", None)
    return env


def on_pty(home: Path, *args: str, send: str | None = None) -> tuple[int, bytes]:
    """Run hermes on a pseudo-terminal; its exit code and every byte it wrote."""
    seen = io.BytesIO()
    child = pexpect.spawn(
        sys.executable,
        ["-c", ENTRY, *args],
        env=_env(home),
        cwd=str(home),
        timeout=60,
        dimensions=(50, 200),
    )
    child.logfile_read = seen
    if send is not None:
        child.expect(rb"hermes> ")
        child.sendline(send.encode())
    child.expect(pexpect.EOF)
    child.close()
    output = seen.getvalue()
    assert child.exitstatus is not None, output
    return child.exitstatus, output


@pytest.mark.parametrize(
    "args",
    [
        ("sessions", "list"),
        ("sessions", "show", SID),
        ("sessions", "show", SID, "--all"),
        ("sessions", "show", SID, "--as-of", "3"),
        ("sessions", "search", "deploy"),
        ("sessions", "search", "pwned"),
        ("sessions", "history", SID),
    ],
    ids=lambda a: " ".join(a),
)
def test_read_commands_neutralise_stored_control_characters(
    home: Path, args: tuple[str, ...]
) -> None:
    """list, show, search and history on a terminal print the payload as visible text: no raw
    ESC/C0/C1 byte or bidi override, the retitle shown as ``␛]0;pwned␇``, markup as typed."""
    code, output = on_pty(home, *args)
    text = assert_safe(output)
    assert code == 0, text
    assert "␛]0;pwned␇" in text or "pwned" not in text
    assert "MARKUP" in text


def test_show_prints_every_field_visibly(home: Path) -> None:
    """show prints content, tool name, arguments and output with the escapes made visible and
    rich markup left as typed."""
    text = assert_safe(on_pty(home, "sessions", "show", SID)[1])
    assert "deploy ␛]0;pwned␇␛[2J\\x9b2J fake␍real \\u202eevil [bold red]MARKUP[/] :thumbs_up:" in (
        text
    )
    assert "tool call grep␛]0;pwned␇(" in text
    assert "#2 tool (grep␛]0;pwned␇)" in text


def test_list_collapses_newlines_in_one_line_columns(home: Path) -> None:
    """A workspace or preview holding a newline stays on its row: one header, one row."""
    text = assert_safe(on_pty(home, "sessions", "list")[1])
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 2, text
    assert lines[0].startswith("TITLE")
    assert "/tmp/work␛]0;pwned␇␛[2J next" in lines[1]
    assert TITLE[:20] in lines[1]


def test_history_neutralises_actor_model_and_summaries(home: Path) -> None:
    """history shows actors, model names and message summaries with visible escapes."""
    text = assert_safe(on_pty(home, "sessions", "history", SID)[1])
    assert "test␛[2J" in text
    assert "gpt␛]0;pwned␇\\x9b2J" in text


def test_json_output_stays_exact(home: Path) -> None:
    """--json keeps every stored character exactly (JSON escapes control characters itself)."""
    out = subprocess.run(
        [sys.executable, "-c", ENTRY, "sessions", "show", SID, "--json"],
        env=_env(home),
        capture_output=True,
        check=True,
    ).stdout
    assert b"\x1b" not in out
    data = json.loads(out)
    assert [m["content"] for m in data["messages"]] == [PAYLOAD] * 3
    assert data["messages"][1]["tool_calls"][0]["name"] == f"grep{OSC_TITLE}"


def test_resume_recap_panel_neutralises_and_shows_markup(home: Path) -> None:
    """The recap panel drawn on resume shows the payload visibly, markup as typed, and the
    chat's own replies (the offline echo of hostile input) are neutralised too."""
    code, output = on_pty(home, "--resume", SID, "--no-restore-cwd", send="/exit")
    text = assert_safe(output)
    assert code == 0, text
    assert "Recap of" in text
    assert "[bold red]MARKUP[/]" in text
    assert "␛]0;pwned␇" in text


def test_chat_reply_is_neutralised(home: Path) -> None:
    """A reply that echoes hostile text (the offline responder echoes the message) prints with
    its escapes visible."""
    code, output = on_pty(home, "-q", f"say {OSC_TITLE}{CLEAR} please", "--source", "cli")
    text = assert_safe(output)
    assert code == 0, text
    assert "say ␛]0;pwned␇␛[2J please" in text


def test_doctor_neutralises_the_profile_path(tmp_path: Path) -> None:
    """doctor prints a profile path holding escapes (a directory may be named anything)
    visibly, and rich markup in it as typed."""
    home = tmp_path / f"h{OSC_TITLE}[bold]x"
    home.mkdir()
    with SessionEngine.open(home) as engine:
        engine.start_session("cli", title="t")
    code, output = on_pty(home, "doctor")
    text = assert_safe(output)
    assert "h␛]0;pwned␇[bold]x" in text, text
    assert code in (0, 1)


def test_error_lines_are_neutralised(home: Path) -> None:
    """The ``Error:`` line of a failed command shows a hostile reference visibly."""
    code, output = on_pty(home, "sessions", "show", f"nope{OSC_TITLE}")
    text = assert_safe(output)
    assert code == 1
    assert "Error:" in text and "pwned" in text


def test_usage_error_lines_are_neutralised(home: Path) -> None:
    """click's own usage errors, which quote the bad value, are neutralised too."""
    code, output = on_pty(home, "sessions", "list", "--limit", f"5{OSC_TITLE}")
    text = assert_safe(output)
    assert code == 2
    assert "Invalid value for '--limit'" in text and "pwned" in text


def test_clean_and_one_line_rules() -> None:
    """clean keeps newlines and tabs and shows C0 as control pictures, DEL as ␡, C1 and bidi
    controls as escapes; one_line also folds every line break and whitespace run to a space."""
    assert clean("a\x1b[2Jb\x07\x00\x7f") == "a␛[2Jb␇␀␡"
    assert clean("x\x9b\x85\u202e\u2066y") == "x\\x9b\\x85\\u202e\\u2066y"
    assert clean("line\n\tindent") == "line\n\tindent"
    assert clean("lone \udcff") == "lone \\udcff"
    assert one_line("  a\n\nb\r\nc\u2028d\t e  ") == "a b c d e"
    assert one_line("sep\x1c\x1fend") == "sep␜␟end"
    assert clean("plain ascii") == "plain ascii"


def test_table_aligns_cjk_by_display_width() -> None:
    """CJK and emoji take two cells: columns after them still line up."""
    lines = table(("TITLE", "ID"), [("部署脚本", "a1"), ("deploy", "b2"), ("😀 ok", "c3")])
    tails = ["a1", "b2", "c3"]
    columns = {width(line[: line.index(tail)]) for line, tail in zip(lines[1:], tails, strict=True)}
    assert len(columns) == 1, lines
