"""The ``hermes`` CLI on a team gateway: its turns go to whichever gateway owns the profile."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pexpect
import pytest

from hermes_es.gateway.paths import GatewayPaths, read_endpoint
from tests.gateway.conftest import GatewayProcess, SlowModel, model_config, write_config
from tests.gateway.test_cli_gateway import ENTRY, hermes
from tests.gateway.test_team_gateway import _env


def _team_host(tmp_path: Path, name: str, other: str, model: SlowModel, url: str) -> Path:
    home = tmp_path / name
    home.mkdir()
    extra = f"store: {{url: '{url}'}}\ngateway:\n  team_homes: ['{tmp_path / other}']\n"
    write_config(home, model_config(model, extra))
    return home


def _session(stderr: str) -> str:
    found = re.search(r"Session: (\S+)", stderr)
    assert found, stderr
    return found.group(1)


def test_cli_turns_go_to_the_live_owner_before_and_after_kill9(
    tmp_path: Path, slow_model: SlowModel, pg_url: str
) -> None:
    """With gateway.team_homes set, ``hermes -q`` on the standby's host runs its turn on the
    owner (saying which gateway); after the owner is SIGKILLed, ``hermes -r SID -q`` on the
    dead owner's host attaches to the same session through the standby that took over; an
    interactive chat attached to the killed owner reconnects to the new owner, says which
    gateway it is on, and its next message runs there."""
    home_a = _team_host(tmp_path, "host-a", "host-b", slow_model, pg_url)
    home_b = _team_host(tmp_path, "host-b", "host-a", slow_model, pg_url)
    env_a, env_b = _env(home_a), _env(home_b)
    gw_a, gw_b = GatewayProcess(home_a, env_a), GatewayProcess(home_b, env_b)
    try:
        handle_a = gw_a.start()
        assert handle_a.endpoint.role == "owner"
        assert gw_b.start().endpoint.role == "standby"

        first = hermes(env_b, "-q", "from the standby host")
        assert first.returncode == 0, first.stderr
        assert "echo: from the standby host" in first.stdout
        assert f"through the owner gateway of {home_a}" in first.stderr
        assert slow_model.count("from the standby host") == 1
        sid = _session(first.stderr)
        chat = pexpect.spawn(
            sys.executable,
            ["-c", ENTRY, "-r", sid],
            env=env_a,
            cwd=str(home_a),
            encoding="utf-8",
            timeout=30,
            dimensions=(50, 200),
        )
        chat.expect_exact("› ")
        chat.sendline("before the kill")
        chat.expect_exact("echo: before the kill")
        chat.expect_exact("› ")

        gw_a.kill9()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            endpoint = read_endpoint(GatewayPaths(home_b))
            if endpoint is not None and endpoint.role == "owner":
                break
            time.sleep(0.05)
        else:
            pytest.fail("the standby did not take over within 15 s")

        second = hermes(env_a, "-r", sid, "-q", "after the kill")
        assert second.returncode == 0, second.stderr
        assert "echo: after the kill" in second.stdout
        assert f"through the owner gateway of {home_b}" in second.stderr
        assert _session(second.stderr) == sid
        assert slow_model.count("after the kill") == 1

        chat.sendline("after the drop")
        chat.expect_exact(f"now on the gateway of {home_b}")
        chat.expect_exact("echo: after the kill")  # replayed: what it missed while away
        chat.expect_exact("echo: after the drop")
        chat.expect_exact("› ")
        chat.sendline("/exit")
        chat.expect(pexpect.EOF)
        assert slow_model.count("after the drop") == 1

        third = hermes(env_b, "-r", sid, "-q", "on the new owner")  # local owner: no notice
        assert third.returncode == 0, third.stderr
        assert "through the owner gateway" not in third.stderr
        assert _session(third.stderr) == sid
        assert gw_b.terminate() == 0
    finally:
        for gateway in (gw_a, gw_b):
            if gateway.proc is not None and gateway.proc.poll() is None:
                gateway.proc.kill()
                gateway.proc.wait(10)
