"""An interactive ``hermes`` on a pty, attached through a team's standby gateway, while the owner
gateway is SIGKILLed mid-turn: each line is stored once, the interrupted one is reported
unknown (what happened, how to go on), nothing asks to send it again."""

from __future__ import annotations

import io
import re
import signal
import sys
import time
from pathlib import Path

import pexpect

from hermes_es.gateway.client import Connection
from tests.gateway.conftest import GatewayProcess, SlowModel
from tests.gateway.test_cli_gateway import ENTRY
from tests.gateway.test_team_failover_cli import _plain_host, _stop
from tests.gateway.test_team_gateway import TAKEOVER_BOUND_S, _env, _wait_role

RESEND_WORDS = re.compile(r"resend|send it again|send again|submit again|retype|try again", re.I)
"""What the chat must never tell the user to do with a message it already has."""


def _admitted_texts(conn: Connection, sid: str) -> list[str]:
    events = conn.call("events.since", {"session_id": sid, "last_sequence": 0})["events"]
    return [e["event"]["text"] for e in events if e["type"] == "hermes.turn.admitted"]


def test_standby_chat_across_an_owner_kill9_stores_each_line_once_and_reports_unknown(
    tmp_path: Path, slow_model: SlowModel, pg_url: str
) -> None:
    """``hermes`` on a pty on the standby's host (no ``gateway.team_homes``): a line runs on the
    owner and its reply streams back; the owner is SIGKILLed while the next line's turn runs;
    the standby takes over within 5 s, the chat (still attached) says that turn is unknown,
    that the message is kept and not sent again, how to resolve it (/discard, or the command
    naming the session) and how to resume; a line typed meanwhile is reported queued; after
    /discard it runs, a new line runs on the new owner, /exit prints the resume hint. Each
    reply is drawn once (the owner's relayed stream and the stored reply are not both shown).
    In the log each line is admitted exactly once and the model saw each once."""
    home_a = _plain_host(tmp_path, "host-a", slow_model, pg_url)
    home_b = _plain_host(tmp_path, "host-b", slow_model, pg_url)
    env_b = _env(home_b)
    gw_a, gw_b = GatewayProcess(home_a, _env(home_a)), GatewayProcess(home_b, env_b)
    chat: pexpect.spawn | None = None
    try:
        assert gw_a.start().endpoint.role == "owner"
        handle_b = gw_b.start()
        assert handle_b.endpoint.role == "standby"
        chat = pexpect.spawn(
            sys.executable,
            ["-c", ENTRY],
            env=env_b,
            cwd=str(home_b),
            encoding="utf-8",
            timeout=30,
            dimensions=(50, 200),
        )
        transcript = io.StringIO()
        chat.logfile_read = transcript
        chat.expect(r"Session (\S+) \(through the gateway\)")
        sid = chat.match.group(1)
        chat.expect_exact("› ")
        chat.sendline("before the kill")
        chat.expect_exact("echo: before the kill")  # run by the owner, streamed via the standby
        chat.expect_exact("› ")

        chat.sendline("SLOW when the owner dies")
        assert slow_model.arrived.wait(30)
        chat.sendline("typed during the takeover")  # read once the turn before it is over
        killed = time.monotonic()
        gw_a.kill9()
        _wait_role(home_b, "owner", 15.0)
        assert time.monotonic() - killed < TAKEOVER_BOUND_S
        chat.expect_exact("⚠ turn 2 is unknown: the gateway running it stopped")
        chat.expect_exact("Your message is kept and is not sent again.")
        chat.expect_exact(f"/discard resolves it (or: hermes sessions resolve {sid} --discard)")
        chat.expect_exact(f"hermes --resume {sid}")
        notice = chat.before + chat.after
        chat.expect_exact("(queued: it runs once the unknown turn is resolved with /discard)")
        chat.expect_exact("› ")
        chat.sendline("/discard")
        chat.expect_exact("turn 2 discarded; queued messages run now")
        chat.expect_exact("echo: typed during the takeover")
        chat.sendline("after the takeover")
        chat.expect_exact("echo: after the takeover")  # run by the standby, now the owner
        chat.expect_exact("› ")
        chat.sendline("/exit")
        chat.expect_exact(f"Resume with: hermes --resume {sid}")
        chat.expect(pexpect.EOF)
        said = chat.before
        chat.close()
        assert chat.exitstatus == 0

        drawn = transcript.getvalue()
        for text in ("before the kill", "typed during the takeover", "after the takeover"):
            assert drawn.count(f"echo: {text}") == 1, drawn  # the reply is shown once
        for text in (notice, said):
            assert not RESEND_WORDS.search(text), text
            assert "Traceback" not in text and "NOT_OWNER" not in text and "4032" not in text
        with handle_b.connect() as conn:
            assert _admitted_texts(conn, sid) == [
                "before the kill",
                "SLOW when the owner dies",
                "typed during the takeover",
                "after the takeover",
            ]
            summary = conn.call("session.resume", {"ref": sid})
            assert summary["unknown"] == [] and summary["queued"] == []
        for text in (
            "before the kill",
            "SLOW when the owner dies",
            "typed during the takeover",
            "after the takeover",
        ):
            assert slow_model.count(text) == 1, text
        assert gw_b.terminate() == 0
    finally:
        if chat is not None and chat.isalive():
            chat.terminate(force=True)
        _stop(gw_a, gw_b)


def test_standby_chat_line_sent_while_the_owner_is_frozen_runs_once_after_the_takeover(
    tmp_path: Path, slow_model: SlowModel, pg_url: str
) -> None:
    """``hermes`` on a pty on the standby's host sends a line while the owner is frozen
    (SIGSTOP: it still holds the lock, so nothing runs the turn): the standby admits it and
    the chat waits, asking nothing; the owner is then SIGKILLed, the standby takes over and
    its recovery runs that admitted (never started) turn: the reply is drawn once, the line
    is admitted once and the model saw it once."""
    home_a = _plain_host(tmp_path, "host-a", slow_model, pg_url)
    home_b = _plain_host(tmp_path, "host-b", slow_model, pg_url)
    env_b = _env(home_b)
    gw_a, gw_b = GatewayProcess(home_a, _env(home_a)), GatewayProcess(home_b, env_b)
    chat: pexpect.spawn | None = None
    try:
        assert gw_a.start().endpoint.role == "owner"
        handle_b = gw_b.start()
        assert handle_b.endpoint.role == "standby"
        chat = pexpect.spawn(
            sys.executable,
            ["-c", ENTRY],
            env=env_b,
            cwd=str(home_b),
            encoding="utf-8",
            timeout=30,
            dimensions=(50, 200),
        )
        transcript = io.StringIO()
        chat.logfile_read = transcript
        chat.expect(r"Session (\S+) \(through the gateway\)")
        sid = chat.match.group(1)
        chat.expect_exact("› ")
        assert gw_a.proc is not None
        gw_a.proc.send_signal(signal.SIGSTOP)
        chat.sendline("while the owner is frozen")
        time.sleep(1.5)  # admitted by the standby; the frozen owner runs nothing
        assert slow_model.count("while the owner is frozen") == 0
        gw_a.kill9()
        _wait_role(home_b, "owner", 15.0)
        chat.expect_exact("echo: while the owner is frozen")
        chat.expect_exact("› ")
        chat.sendline("/exit")
        chat.expect_exact(f"Resume with: hermes --resume {sid}")
        chat.expect(pexpect.EOF)
        chat.close()
        assert chat.exitstatus == 0
        drawn = transcript.getvalue()
        assert drawn.count("echo: while the owner is frozen") == 1, drawn
        assert not RESEND_WORDS.search(drawn) and "is unknown" not in drawn, drawn
        assert "Traceback" not in drawn
        with handle_b.connect() as conn:
            assert _admitted_texts(conn, sid) == ["while the owner is frozen"]
        assert slow_model.count("while the owner is frozen") == 1
        assert gw_b.terminate() == 0
    finally:
        if chat is not None and chat.isalive():
            chat.terminate(force=True)
        _stop(gw_a, gw_b)
