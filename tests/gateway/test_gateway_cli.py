"""``hermes gateway start|status|ensure|stop`` as real processes, and the legacy reset warning."""

from __future__ import annotations

import json
from pathlib import Path

from hermes_es.config import legacy_reset_findings, load_config
from tests.gateway.conftest import hermes


def test_start_status_ensure_stop_per_profile(home: Path, gw_env: dict[str, str]) -> None:
    """start runs one in the background; ensure reuses it; stop drains it; status says so."""
    assert hermes(gw_env, "gateway", "status").stdout.strip() == "no gateway running"
    started = hermes(gw_env, "gateway", "start", "-p", "work", "--json")
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    assert info["started"] is True and info["profile"] == "work"
    assert info["host"] == "127.0.0.1" and info["url"].startswith("ws://127.0.0.1:")
    try:
        again = json.loads(hermes(gw_env, "-p", "work", "gateway", "ensure", "--json").stdout)
        assert again["started"] is False and again["pid"] == info["pid"]
        status = json.loads(hermes(gw_env, "gateway", "status", "-p", "work", "--json").stdout)
        assert status["running"] is True and status["instance_id"] == info["instance_id"]
        assert json.loads(hermes(gw_env, "gateway", "status", "--json").stdout) == {
            "running": False
        }  # the default profile has none
    finally:
        stopped = hermes(gw_env, "gateway", "stop", "-p", "work")
    assert stopped.returncode == 0 and f"gateway stopped (pid {info['pid']})" in stopped.stdout
    assert not (home / "profiles" / "work" / "gateway.json").exists()
    assert hermes(gw_env, "gateway", "stop", "-p", "work").stdout.strip() == "no gateway running"


def test_startup_warns_about_legacy_session_reset_like_doctor(
    home: Path, gw_env: dict[str, str]
) -> None:
    """A legacy session_reset block is reported at gateway start with doctor's exact text."""
    (home / "config.yaml").write_text("session_reset:\n  mode: idle\n", encoding="utf-8")
    [finding] = legacy_reset_findings(load_config(home / "config.yaml").raw, {})
    started = hermes(gw_env, "gateway", "start")
    assert started.returncode == 0, started.stderr
    hermes(gw_env, "gateway", "stop")
    assert finding in (home / "gateway.log").read_text(encoding="utf-8")
    assert finding in hermes(gw_env, "doctor").stdout
