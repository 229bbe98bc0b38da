"""``/new`` and ``/reset`` through the gateway (the lineage and ends embedded mode records), and
one-shot runs through it: streamed as they arrive, a failure says how to resume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pexpect

from hermes_es.commands.engine import SessionEngine
from tests.gateway.conftest import GatewayProcess
from tests.openai_server import fake_model

ENTRY = "from hermes_es.cli import main; main()"


def _spawn(env: dict[str, str], *args: str) -> pexpect.spawn:
    return pexpect.spawn(
        sys.executable,
        ["-c", ENTRY, *args],
        env=env,
        cwd=env["HERMES_HOME"],
        encoding="utf-8",
        timeout=30,
        dimensions=(50, 200),
    )


def _sessions(home: Path) -> list[tuple[str, str, str, str, int, int]]:
    """(id, parent id, parent kind, end reason, ended, messages) in start order."""
    with SessionEngine(home / "state.db") as engine:
        rows = (
            engine.store.connection()
            .execute(
                "SELECT id, parent_id, parent_kind, end_reason, ended, message_count"
                " FROM sessions ORDER BY started_at, id"
            )
            .fetchall()
        )
    return [tuple(r) for r in rows]  # type: ignore[misc]


def _new_and_reset(env: dict[str, str], prompt: str) -> str:
    """Talk, /reset, talk, /new, leave without a word; returns the transcript."""
    child = _spawn(env)
    child.expect_exact(prompt)
    child.sendline("alpha")
    child.expect_exact('you said "alpha"')
    child.expect_exact(prompt)
    child.sendline("/reset")
    child.expect(r"Reset: new conversation (\S+) \(continues from (\S+)\)")
    child.expect_exact(prompt)
    child.sendline("beta")
    child.expect_exact('you said "beta"')
    child.expect_exact(prompt)
    child.sendline("/new")
    child.expect_exact("New session ")
    child.expect_exact(prompt)
    child.sendline("/exit")
    child.expect_exact("Nothing was said, so no session was kept.")
    child.expect(pexpect.EOF)
    return str(child.before)


def _shape(rows: list[tuple[str, str, str, str, int, int]]) -> list[tuple[object, ...]]:
    """Sessions with ids replaced by their start index (so two stores compare)."""
    index = {r[0]: i for i, r in enumerate(rows)}
    return [(index.get(r[1], r[1]), r[2], r[3], r[4], r[5] > 0) for r in rows]


def test_new_and_reset_through_the_gateway_record_what_embedded_records(
    tmp_path: Path, home: Path, gateway: GatewayProcess, gw_env: dict[str, str]
) -> None:
    """/reset links the new session to the old (kind reset) and ends the old one new_session;
    /new ends the old one, an unused session is dropped on exit: the same rows as embedded."""
    gateway.start()
    _new_and_reset(gw_env, "› ")
    through = _sessions(home)
    assert gateway.terminate() == 0
    embedded_home = tmp_path / "embedded"
    embedded_home.mkdir()
    env = {**gw_env, "HERMES_HOME": str(embedded_home), "HERMES_NO_GATEWAY": "1"}
    _new_and_reset(env, "hermes> ")
    alone = _sessions(embedded_home)
    a, b = through[0][0], through[1][0]
    assert through[1][1:3] == (a, "reset")
    assert through[0][3] == "new_session" and through[1][3] == "new_session"
    assert len(through) == 2  # the session /new made, left unused, was not kept
    assert _shape(through) == _shape(alone)
    with SessionEngine(home / "state.db") as engine:
        edges = engine.store.connection().execute("SELECT child_id, parent_id, kind FROM lineage")
        assert (b, a, "reset") in [tuple(e) for e in edges.fetchall()]


def test_create_link_errors_name_the_field(home: Path, gateway: GatewayProcess) -> None:
    """session.create refuses an unknown parent_kind and a dangling parent, changing nothing."""
    handle = gateway.start()
    with handle.connect("cli") as conn:
        from hermes_es.gateway.client import GatewayError

        for params, needle in (
            ({"parent_kind": "branch", "leave": "x"}, "$.parent_kind"),
            ({"parent_kind": "reset"}, "needs parent_id or leave"),
            ({"parent_id": "20260101_000000_abcdef", "parent_kind": "reset"}, "20260101_000000"),
        ):
            try:
                conn.call("session.create", params)
            except GatewayError as exc:
                assert needle in exc.message
            else:
                raise AssertionError(f"session.create accepted {params}")
    assert _sessions(home) == []
    assert gateway.terminate() == 0


def _fake_config(home: Path, url: str) -> None:
    (home / "config.yaml").write_text(
        f"model:\n  provider: openai\n  base_url: {url}\n  name: test-model\n"
        "  max_retries: 0\n  timeout: 10\n",
        encoding="utf-8",
    )


def test_oneshot_through_the_gateway_streams_as_it_arrives(
    home: Path, gateway: GatewayProcess, gw_env: dict[str, str]
) -> None:
    """``hermes -q`` and ``-c -q`` draw reply pieces while the turn still runs, each once."""
    with fake_model(slow_delay=0.4) as server:
        _fake_config(home, server.base_url)
        gateway.start()
        for args in (("-q", "slow 6"), ("-c", "-q", "slow 6")):
            child = _spawn(gw_env, *args)
            child.expect_exact("piece1")
            early = str(child.before)
            assert child.isalive() and "piece5" not in early  # drawn before the turn ended
            child.expect(pexpect.EOF)
            out = early + "piece1" + str(child.before)
            assert out.count("piece5") == 1 and out.count("piece0") == 1
            assert "Resume with: hermes --resume" in out
            child.close()
            assert child.exitstatus == 0
        assert gateway.terminate() == 0


def test_failed_oneshot_through_the_gateway_says_how_to_resume(
    home: Path, gateway: GatewayProcess, gw_env: dict[str, str]
) -> None:
    """A one-shot whose model call fails exits 1 naming the session and how to resume it; the
    message is stored and the session ended run_complete."""
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    _fake_config(home, f"http://127.0.0.1:{dead}/v1")
    gateway.start()
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, "-q", "hello"],
        env=gw_env,
        cwd=home,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    rows = _sessions(home)
    assert done.returncode == 1, done.stderr
    sid = rows[0][0]
    assert f"Session: {sid}" in done.stderr and f"hermes --resume {sid}" in done.stderr
    assert "Traceback" not in done.stderr
    assert rows[0][3:] == ("run_complete", 1, 1)  # the prompt is stored
    assert gateway.terminate() == 0
