"""Consistency a script can rely on: empty stores, --as-of bounds, headers, pipes closed early,
one case rule for --workspace, one default search scope, no empty sessions left by a chat,
compression children that keep their launch settings, and CJK-aligned tables."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.queries.listing import DEFAULT_HIDDEN_SOURCES
from hermes_es.queries.lookup import started_event
from hermes_es.terminal_text import width

ENTRY = "from hermes_es.cli import main; main()"
SID = "20250101_000000_abcdef"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    env.update({"HERMES_HOME": str(home), "COLUMNS": "200", "NO_COLOR": "1"})
    return env


def hermes(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real ``hermes`` program."""
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        env=_env(home),
        cwd=home,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_fresh_home_lists_no_sessions(tmp_path: Path) -> None:
    """A HERMES_HOME with nothing in it: list says "no sessions", search "no matches", both
    exit 0, and neither creates state.db."""
    listed = hermes(tmp_path, "sessions", "list")
    assert (listed.returncode, listed.stdout, listed.stderr) == (0, "no sessions\n", "")
    found = hermes(tmp_path, "sessions", "search", "anything")
    assert (found.returncode, found.stdout) == (0, "no matches\n")
    assert json.loads(hermes(tmp_path, "sessions", "search", "x", "--json").stdout) == []
    assert not (tmp_path / "state.db").exists()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """One session: started (v1), two messages (v2, v3)."""
    with SessionEngine.open(tmp_path, clock=lambda: 1_700_000_000.0, actor="t") as engine:
        engine.start_session("cli", session_id=SID, title="audit", cwd="/tmp/Proj/My-App")
        engine.append_message(SID, "user", "first question")
        engine.append_message(SID, "assistant", "first answer")
    return tmp_path


def test_show_as_of_zero_is_a_usage_error(store: Path) -> None:
    """--as-of 0 is not a version: exit 2 naming the option."""
    result = hermes(store, "sessions", "show", SID, "--as-of", "0")
    assert result.returncode == 2
    assert "Invalid value for '--as-of'" in result.stderr


def test_show_as_of_one_says_what_it_shows(store: Path) -> None:
    """--as-of 1 shows the session as it was just after it started, and says so."""
    result = hermes(store, "sessions", "show", SID, "--as-of", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{SID} as of event v1 of 3: 0 message(s) shown",
        "(no messages)",
    ]
    later = hermes(store, "sessions", "show", SID, "--as-of", "2").stdout
    assert later.startswith(f"{SID} as of event v2 of 3: 1 message(s) shown")
    assert "first question" in later and "first answer" not in later


def test_history_has_a_header(store: Path) -> None:
    """history's first line names its columns; one line per event follows."""
    lines = hermes(store, "sessions", "history", SID).stdout.splitlines()
    assert lines[0].split() == ["VERSION", "TIME", "EVENT", "ACTOR", "SUMMARY"]
    assert [line.split()[0] for line in lines[1:]] == ["v1", "v2", "v3"]


def test_output_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """``hermes sessions show … | head -1``: the reader leaves early; hermes prints nothing on
    stderr (no "Error: Broken pipe", no traceback) and exits 141 like a SIGPIPE'd tool."""
    with SessionEngine.open(tmp_path) as engine:
        engine.start_session("cli", session_id=SID)
        for n in range(4):
            engine.append_message(SID, "user", f"line {n}\n" + "words " * 100_000)
        # history prints a line per event: enough events that its output cannot fit in the
        # pipe's buffer, so the command is still writing when the reader leaves.
        for n in range(2000):
            engine.append_message(SID, "user", f"m{n}")
    for args in (("sessions", "show", SID), ("sessions", "history", SID)):
        with subprocess.Popen(
            [sys.executable, "-c", ENTRY, *args],
            env=_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            assert proc.stdout.readline()
            proc.stdout.close()
            err = proc.stderr.read()
            assert proc.wait(timeout=60) == 141
        assert err == b"", err


def test_workspace_matching_has_one_case_rule(store: Path) -> None:
    """--workspace matches case-sensitively, by substring and by basename alike."""

    def ids(needle: str) -> list[str]:
        out = hermes(store, "sessions", "list", "--workspace", needle, "--json")
        return [row["id"] for row in json.loads(out.stdout)]

    assert ids("My-App") == [SID]  # basename
    assert ids("Proj/My") == [SID]  # substring
    assert ids("my-app") == []  # a different basename
    assert ids("proj/my") == []  # a different substring


def test_default_search_scope_is_the_same_everywhere(tmp_path: Path) -> None:
    """cron, kanban and tool sessions are left out of sessions list, sessions search and
    engine.search() alike, and each finds them when the source is named."""
    with SessionEngine.open(tmp_path) as engine:
        for source in ("cli", "oneshot", *DEFAULT_HIDDEN_SOURCES):
            sid = engine.start_session(source, session_id=f"s-{source}")
            engine.append_message(sid, "user", f"zebra from {source}")
        api = {h.session_id for h in engine.search("zebra")}
        api_named = {h.session_id for h in engine.search("zebra", sources=["cron"])}
    listed = {r["id"] for r in json.loads(hermes(tmp_path, "sessions", "list", "--json").stdout)}
    searched = {
        g["tip_id"]
        for g in json.loads(hermes(tmp_path, "sessions", "search", "zebra", "--json").stdout)
    }
    assert api == listed == searched == {"s-cli", "s-oneshot"}
    assert api_named == {"s-cron"}
    listed_cron = json.loads(
        hermes(tmp_path, "sessions", "list", "--source", "cron", "--json").stdout
    )
    assert [r["id"] for r in listed_cron] == ["s-cron"]


def test_chat_left_without_a_message_leaves_no_session(tmp_path: Path) -> None:
    """``hermes`` on a terminal, then /exit (or end of input) before any message: no session
    is left in the store; one with a message is kept."""
    for leave in (b"/exit", b"\x04"):
        seen = io.BytesIO()
        child = pexpect.spawn(
            sys.executable, ["-c", ENTRY], env=_env(tmp_path), cwd=str(tmp_path), timeout=60
        )
        child.logfile_read = seen
        child.expect(rb"hermes> ")
        if leave == b"\x04":
            child.sendeof()
        else:
            child.sendline(leave)
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0, seen.getvalue()
    listed = json.loads(hermes(tmp_path, "sessions", "list", "--json").stdout or "[]")
    assert listed == []
    kept = hermes(tmp_path, "-q", "hello")
    assert kept.returncode == 0, kept.stderr
    assert len(json.loads(hermes(tmp_path, "sessions", "list", "--json").stdout)) == 1


def test_compression_child_inherits_model_config_and_launch_flags(tmp_path: Path) -> None:
    """A session split by compression continues with the parent's model config (and current
    reasoning effort), launch flags, platform and chat id."""
    with SessionEngine.open(tmp_path) as engine:
        parent = engine.start_session(
            "telegram",
            platform="telegram",
            chat_id="42",
            model="gpt-x",
            model_config={"provider": "openai", "temperature": 0.2},
            launch_flags={"argv": ["-m", "gpt-x", "--yolo"]},
        )
        engine.append_message(parent, "user", "hello")
        engine.set_reasoning(parent, "high")
        child = engine.continue_session(parent, [{"role": "user", "content": "summary"}])
        started = started_event(engine.store.connection(), child)
    assert started is not None
    assert started.model == "gpt-x"
    assert started.model_config == {
        "provider": "openai",
        "temperature": 0.2,
        "reasoning_effort": "high",
    }
    assert started.launch_flags == {"argv": ["-m", "gpt-x", "--yolo"]}
    assert (started.platform, started.chat_id) == ("telegram", "42")


def test_cjk_titles_keep_list_columns_aligned(tmp_path: Path) -> None:
    """Titles in Chinese, Japanese and Korean, emoji and plain ASCII: every column of
    ``sessions list`` starts at the same display column on every row."""
    with SessionEngine.open(tmp_path) as engine:
        for n, title in enumerate(["部署脚本", "デプロイ", "배포 스크립트", "🚀 launch", "plain"]):
            sid = engine.start_session("cli", session_id=f"s{n}", title=title, cwd="/tmp/w")
            engine.append_message(sid, "user", f"{title} 你好")
    lines = hermes(tmp_path, "sessions", "list").stdout.splitlines()
    assert len(lines) == 6
    starts = {width(line[: line.index("/tmp/w")]) for line in lines[1:]}
    assert len(starts) == 1, lines
    source_starts = {width(line[: line.index(" cli ") + 1]) for line in lines[1:]}
    assert len(source_starts) == 1, lines
