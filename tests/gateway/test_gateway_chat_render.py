"""The interactive chat through a gateway draws like the embedded one: streamed deltas, tool
calls and results (its own turns and the other terminal's), the recap on resume, and slash
commands forwarded or refused by name."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pexpect

from hermes_es.commands.engine import SessionEngine
from tests.gateway.conftest import GatewayProcess, write_config
from tests.openai_server import FakeModel, fake_model

ENTRY = "from hermes_es.cli import main; main()"
PROMPT = "› "


def _config(server: FakeModel, extra: str = "") -> str:
    return (
        f"model:\n  provider: openai\n  base_url: {server.base_url}\n  name: test-model\n"
        f"  max_retries: 0\n{extra}"
    )


def _seed(home: Path, text: str) -> str:
    """A stored session with one exchange (written before the gateway starts)."""
    with SessionEngine(home / "state.db") as engine:
        sid = engine.start_session("cli", cwd=str(home))  # its tools run there
        engine.append_message(sid, "user", text)
        engine.append_message(sid, "assistant", f"echo: {text}")
        return sid


def _terminal(env: dict[str, str], home: Path, *args: str) -> tuple[pexpect.spawn, io.StringIO]:
    """A real ``hermes`` on a pty, and everything it drew so far."""
    seen = io.StringIO()
    child = pexpect.spawn(
        sys.executable,
        ["-c", ENTRY, *args],
        env={**env, "NO_COLOR": "1"},
        cwd=str(home),
        encoding="utf-8",
        timeout=40,
        dimensions=(50, 200),
    )
    child.logfile_read = seen
    return child, seen


def _leave(*children: pexpect.spawn) -> None:
    for child in children:
        child.sendline("/exit")
        child.expect(pexpect.EOF)


def test_gateway_chat_draws_the_stream_live_in_both_terminals(
    home: Path, gateway: GatewayProcess, gw_env: dict[str, str]
) -> None:
    """Reply deltas show as they stream (once), tool calls and results show as ⚙/→ lines,
    in the terminal that sent the prompt and in another attached to the session, escaped."""
    (home / "00-\x1b[2Jx.txt").write_text("first")
    sid = _seed(home, "seed")
    with fake_model(slow_delay=0.5) as server:
        write_config(home, _config(server))
        gateway.start()
        one, seen_one = _terminal(gw_env, home, "-r", sid)
        one.expect_exact(PROMPT)
        two, seen_two = _terminal(gw_env, home, "-r", sid)
        two.expect_exact(PROMPT)
        one.sendline("slow 12")
        one.expect_exact("piece1 ")
        assert "piece11" not in one.buffer  # drawn piece by piece, not when the turn ended
        two.expect_exact("piece1 ")  # the other terminal's turn streams here too
        assert "piece11" not in two.buffer
        for child in (one, two):
            child.expect_exact("piece11")
        one.expect_exact(PROMPT)
        one.sendline("list .")
        for child in (one, two):
            child.expect_exact('⚙ list_directory {"path": "."}')
            child.expect_exact("→ 00-␛[2Jx.txt  5")
            child.expect_exact("Tool said: 00-␛[2Jx.txt  5")
        one.expect_exact(PROMPT)
        _leave(one, two)
    for seen in (seen_one.getvalue(), seen_two.getvalue()):
        assert seen.count("piece0 piece1") == 1  # the stored reply is not drawn a second time
        assert seen.count("Tool said:") == 1
        assert "\x1b[2J" not in seen
    assert gateway.terminate() == 0


def test_resume_through_gateway_draws_recap_and_forwards_slash_commands(
    home: Path, gateway: GatewayProcess, gw_env: dict[str, str]
) -> None:
    """``-r`` draws the recap panel (escaped); /title renames through the gateway, /sessions
    lists, /recap redraws, /resume switches (with its recap); /compress and /rewind say they
    are not available, naming them."""
    other = _seed(home, "the other one")
    sid = _seed(home, "hello \x1b]0;pwned\x07 there")
    gateway.start()
    child, seen = _terminal(gw_env, home, "-r", sid)
    child.expect_exact(f"Recap of {sid}")
    child.expect_exact("you: ")  # styled bold by rich
    child.expect_exact("hello ␛]0;pwned␇ there")
    child.expect_exact(PROMPT)
    child.sendline("/title Renamed here")
    child.expect_exact('Title set: "Renamed here"')
    child.expect_exact(PROMPT)
    child.sendline("/sessions")
    child.expect_exact(f"* {sid}  Renamed here")
    child.expect_exact(PROMPT)
    child.sendline("/recap")
    child.expect_exact(f'Recap of {sid} "Renamed here"')
    child.expect_exact(PROMPT)
    for name in ("/compress", "/rewind"):
        child.sendline(name)
        child.expect_exact(f"{name} is not available through the gateway (nothing was done)")
        child.expect_exact(PROMPT)
    child.sendline("/help")
    child.expect_exact("/title NAME")
    child.expect_exact(PROMPT)
    child.sendline(f"/resume {other}")
    child.expect_exact(f"Recap of {other}")
    child.expect_exact("the other one")
    child.expect_exact(PROMPT)
    child.sendline("/bogus")
    child.expect_exact("Unknown command /bogus")
    child.expect_exact(PROMPT)
    _leave(child)
    assert "\x1b]0;pwned" not in seen.getvalue()
    with SessionEngine(home / "state.db") as engine:
        rows = engine.store.connection().execute("SELECT id, title FROM sessions").fetchall()
    assert sorted(tuple(r) for r in rows) == sorted([(sid, "Renamed here"), (other, "")])
    assert gateway.terminate() == 0


def test_resume_through_gateway_honours_minimal_resume_display(
    home: Path, gateway: GatewayProcess, gw_env: dict[str, str]
) -> None:
    """With ``display.resume_display: minimal`` a resume draws one line, not the panel."""
    sid = _seed(home, "short")
    write_config(home, "display:\n  resume_display: minimal\n")
    gateway.start()
    child, seen = _terminal(gw_env, home, "-r", sid)
    child.expect_exact(f"↪ Resumed session {sid} (2 messages)")
    child.expect_exact(PROMPT)
    _leave(child)
    assert "Recap of" not in seen.getvalue()
    assert gateway.terminate() == 0
