"""Tests for hermes_es.config: defaults, typed validation, unknown keys, legacy reset settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_es.config import (
    HermesConfig,
    changed_pickup_keys,
    config_fingerprint,
    fingerprint_digest,
    legacy_reset_findings,
    load_config,
    load_profile_config,
)
from hermes_es.errors import ConfigError


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_missing_file_gives_defaults(tmp_path: Path) -> None:
    """No config.yaml means every documented default, no warnings."""
    loaded = load_config(tmp_path / "config.yaml")
    cfg = loaded.config
    assert not loaded.exists
    assert loaded.unknown_keys == [] and loaded.warnings == []
    assert cfg.model.provider == "offline"
    assert cfg.model.name == "hermes-offline"
    assert cfg.model.timeout == 60.0
    assert cfg.model.reasoning_effort == "medium"
    assert cfg.display.resume_display == "full"
    assert cfg.session.terminal_continue is True
    assert cfg.sessions.max_export_messages == 20000
    assert cfg.sessions.max_import_messages == 20000
    assert cfg.sessions.auto_archive == 0
    assert cfg.sessions.compress_mode == "split"
    assert cfg.sessions.compress_keep_last == 10
    assert cfg.sessions.orphan_end_grace_s == 300
    assert cfg.dashboard.ws_orphan_reap_grace_s == 300
    assert cfg.dashboard.startup_orphan_sweep is True
    assert cfg.toolsets == ["core"]
    assert cfg.max_turns == 90
    assert cfg.mcp_servers == {} and cfg.terminal == {} and cfg.skills == {}


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    """An empty config.yaml is the same as no file."""
    loaded = load_config(_write(tmp_path / "config.yaml", ""))
    assert loaded.exists
    assert loaded.config == HermesConfig()


def test_values_are_read_into_typed_sections(tmp_path: Path) -> None:
    """Values from the file land in the typed config; ints are accepted for float fields."""
    path = _write(
        tmp_path / "config.yaml",
        """
model: {provider: openai, name: gpt-x, timeout: 5, reasoning_effort: high}
display: {resume_display: minimal}
session: {terminal_continue: false}
sessions: {max_export_messages: 50, compress_mode: in_place, auto_archive: 14}
dashboard: {startup_orphan_sweep: false}
toolsets: [core, web]
mcp_servers: {github: {command: gh-mcp}}
terminal: {timeout: 30}
max_turns: 12
checkpoints: true
""",
    )
    cfg = load_config(path).config
    assert cfg.model.provider == "openai" and cfg.model.timeout == 5.0
    assert cfg.display.resume_display == "minimal"
    assert cfg.session.terminal_continue is False
    assert cfg.sessions.max_export_messages == 50
    assert cfg.sessions.compress_mode == "in_place"
    assert cfg.sessions.auto_archive == 14
    assert cfg.dashboard.startup_orphan_sweep is False
    assert cfg.toolsets == ["core", "web"]
    assert cfg.mcp_servers == {"github": {"command": "gh-mcp"}}
    assert cfg.terminal == {"timeout": 30}
    assert cfg.max_turns == 12
    assert cfg.checkpoints is True


def test_null_sections_and_values_mean_defaults(tmp_path: Path) -> None:
    """`display:` or `base_url:` with no value is treated as absent, not as a type error."""
    path = _write(tmp_path / "config.yaml", "display:\nmodel:\n  base_url:\n  name: m\n")
    cfg = load_config(path).config
    assert cfg.display.resume_display == "full"
    assert cfg.model.base_url == "" and cfg.model.name == "m"


def test_wrong_type_error_names_file_and_location(tmp_path: Path) -> None:
    """A string where an int belongs is a ConfigError naming the file and $.sessions.<key>."""
    path = _write(tmp_path / "config.yaml", "sessions:\n  max_export_messages: lots\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message
    assert "Expected `int`, got `str`" in message
    assert "at `$.sessions.max_export_messages`" in message
    assert info.value.subject == str(path)


@pytest.mark.parametrize(
    ("yaml_text", "location", "expected"),
    [
        ("display: {resume_display: loud}", "$.display.resume_display", "Invalid enum value"),
        ("sessions: {compress_mode: zip}", "$.sessions.compress_mode", "Invalid enum value"),
        ("sessions: {auto_archive: -1}", "$.sessions.auto_archive", ">= 0"),
        ("max_turns: 0", "$.max_turns", ">= 1"),
        ("toolsets: core", "$.toolsets", "Expected `array`"),
        ("session: {terminal_continue: 3}", "$.session.terminal_continue", "Expected `bool`"),
        ("model: {timeout: 0}", "$.model.timeout", "> 0"),
        ("display: [1, 2]", "$.display", "Expected `object`"),
    ],
)
def test_invalid_values_report_their_location(
    tmp_path: Path, yaml_text: str, location: str, expected: str
) -> None:
    """Each kind of bad value is refused with the exact JSON-path location."""
    path = _write(tmp_path / "config.yaml", yaml_text + "\n")
    with pytest.raises(ConfigError, match=f"at `{location.replace('$', '[$]')}`") as info:
        load_config(path)
    assert expected in str(info.value)


def test_invalid_yaml_names_file_and_line(tmp_path: Path) -> None:
    """A YAML syntax error is a ConfigError with the file and line number."""
    path = _write(tmp_path / "config.yaml", "model:\n  name: ok\n bad: [unclosed\n")
    with pytest.raises(ConfigError, match=r"invalid YAML at line \d+") as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    """A YAML list at the top level is refused."""
    path = _write(tmp_path / "config.yaml", "- a\n- b\n")
    with pytest.raises(ConfigError, match="expected a mapping at the top level, got list"):
        load_config(path)


def test_unknown_keys_are_listed_not_fatal(tmp_path: Path) -> None:
    """Unknown top-level and section keys come back as dotted paths plus warnings."""
    path = _write(
        tmp_path / "config.yaml",
        """
memory: {enabled: true}
sessions: {max_export_messages: 10, retention_days: 5}
display: {theme: dark}
session_reset: {mode: none}
""",
    )
    loaded = load_config(path)
    assert loaded.config.sessions.max_export_messages == 10
    assert loaded.unknown_keys == ["memory", "sessions.retention_days", "display.theme"]
    assert any("'sessions.retention_days'" in w for w in loaded.warnings)
    assert len(loaded.warnings) == 3


def test_profile_config_is_read_from_profiles_dir(tmp_path: Path) -> None:
    """load_profile_config reads home/profiles/<name>/config.yaml."""
    _write(tmp_path / "profiles" / "work" / "config.yaml", "max_turns: 7\n")
    assert load_profile_config(tmp_path, "work").config.max_turns == 7
    assert load_profile_config(tmp_path, None).config.max_turns == 90


def _assert_plugin_advice(finding: str) -> None:
    assert "sessions never reset on their own" in finding
    assert "core ignores this setting" in finding
    assert "hermes plugins install hermes-session-reset-policy" in finding


@pytest.mark.parametrize("mode", ["idle", "daily", "both"])
def test_legacy_reset_mode_is_reported(mode: str) -> None:
    """session_reset.mode idle/daily/both gives one finding pointing at the plugin."""
    findings = legacy_reset_findings({"session_reset": {"mode": mode}}, {})
    assert len(findings) == 1
    assert f"session_reset.mode: {mode}" in findings[0]
    _assert_plugin_advice(findings[0])


def test_reset_mode_none_is_not_reported() -> None:
    """session_reset.mode: none (what core does anyway) is fine, even with its parameters."""
    assert legacy_reset_findings({"session_reset": {"mode": "none", "idle_minutes": 5}}, {}) == []


def test_session_reset_overrides_are_reported() -> None:
    """Per-platform overrides inside session_reset, and parameters without a mode, are findings."""
    findings = legacy_reset_findings(
        {"session_reset": {"mode": "none", "reset_by_platform": {"telegram": {"mode": "idle"}}}},
        {},
    )
    assert len(findings) == 1 and "session_reset.reset_by_platform" in findings[0]
    _assert_plugin_advice(findings[0])
    bare = legacy_reset_findings({"session_reset": {"idle_minutes": 60}}, {})
    assert len(bare) == 1 and "session_reset.idle_minutes" in bare[0]


def test_reset_policy_anywhere_is_reported() -> None:
    """A reset_policy key at the top level or nested under a platform is a finding."""
    findings = legacy_reset_findings(
        {"reset_policy": "daily", "platforms": {"discord": {"reset_policy": {"mode": "idle"}}}},
        {},
    )
    assert len(findings) == 2
    assert "config sets reset_policy" in findings[0]
    assert "config sets platforms.discord.reset_policy" in findings[1]
    for finding in findings:
        _assert_plugin_advice(finding)


def test_reset_environment_variables_are_reported() -> None:
    """HERMES_SESSION_RESET*, SESSION_RESET_* and HERMES_RESET_* variables are findings."""
    environ = {
        "HERMES_SESSION_RESET_MODE": "daily",
        "SESSION_RESET_IDLE_MINUTES": "30",
        "HERMES_RESET_AT_HOUR": "4",
        "HERMES_HOME": "/x",
        "HERMES_RESET_EMPTY": "",
    }
    findings = legacy_reset_findings({}, environ)
    assert len(findings) == 3
    for name in ("HERMES_SESSION_RESET_MODE", "SESSION_RESET_IDLE_MINUTES", "HERMES_RESET_AT_HOUR"):
        assert any(f"environment variable {name} is set" in f for f in findings)
    for finding in findings:
        _assert_plugin_advice(finding)


def test_load_config_warns_about_legacy_reset_block(tmp_path: Path) -> None:
    """A legacy session_reset block is not an unknown key but shows up in warnings."""
    path = _write(tmp_path / "config.yaml", "session_reset:\n  mode: daily\n  at_hour: 4\n")
    loaded = load_config(path)
    assert loaded.unknown_keys == []
    assert len(loaded.warnings) == 1
    assert "hermes-session-reset-policy" in loaded.warnings[0]


def test_fingerprint_is_stable_and_detects_pickup_changes(tmp_path: Path) -> None:
    """Dict order does not change the fingerprint; a pickup change does, a model change does not."""
    a = load_config(
        _write(tmp_path / "a.yaml", "terminal: {timeout: 30, cwd: /x}\nmcp_servers: {b: 1, a: 2}\n")
    ).config
    b = load_config(
        _write(tmp_path / "b.yaml", "mcp_servers: {a: 2, b: 1}\nterminal: {cwd: /x, timeout: 30}\n")
    ).config
    fa, fb = config_fingerprint(a), config_fingerprint(b)
    assert fa == fb and fingerprint_digest(fa) == fingerprint_digest(fb)
    assert set(fa) == {
        "toolsets",
        "mcp_servers",
        "terminal",
        "max_turns",
        "checkpoints",
        "model.reasoning_effort",
    }
    assert fa["model.reasoning_effort"] == "medium"

    c = load_config(
        _write(
            tmp_path / "c.yaml",
            "terminal: {timeout: 31, cwd: /x}\nmcp_servers: {b: 1, a: 2}\nmodel: {name: other}\n",
        )
    ).config
    fc = config_fingerprint(c)
    assert changed_pickup_keys(fa, fc) == ["terminal"]
    assert fingerprint_digest(fa) != fingerprint_digest(fc)


def test_fingerprint_accepts_chosen_keys() -> None:
    """config_fingerprint returns only the requested dotted keys."""
    fp = config_fingerprint(HermesConfig(), ["max_turns", "model.name", "model.missing"])
    assert fp == {"max_turns": 90, "model.name": "hermes-offline", "model.missing": None}


def test_zero_disables_the_transcript_guards(tmp_path: Path) -> None:
    """max_export_messages / max_import_messages accept 0 (the guard is off)."""
    path = tmp_path / "config.yaml"
    path.write_text("sessions: {max_export_messages: 0, max_import_messages: 0}\n")
    loaded = load_config(path)
    assert loaded.config.sessions.max_export_messages == 0
    assert loaded.config.sessions.max_import_messages == 0


def test_auto_archive_accepts_fractional_days(tmp_path: Path) -> None:
    """sessions.auto_archive takes fractions of a day (and rejects negatives)."""
    path = tmp_path / "config.yaml"
    path.write_text("sessions: {auto_archive: 0.5}\n")
    assert load_config(path).config.sessions.auto_archive == 0.5
    path.write_text("sessions: {auto_archive: -1}\n")
    with pytest.raises(ConfigError, match="auto_archive"):
        load_config(path)
