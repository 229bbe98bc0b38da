"""Tests for hermes_es.home: home, profile, state.db and config.yaml locations."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_es.errors import ValidationError
from hermes_es.home import config_path, hermes_home, profile_dir, state_db_path


def test_hermes_home_uses_env_variable(tmp_path: Path) -> None:
    """$HERMES_HOME wins over ~/.hermes."""
    env = {"HERMES_HOME": str(tmp_path / "h"), "HOME": str(tmp_path / "user")}
    assert hermes_home(env) == tmp_path / "h"


def test_hermes_home_defaults_to_dot_hermes_under_home(tmp_path: Path) -> None:
    """Without $HERMES_HOME (or with it empty) the home is $HOME/.hermes."""
    assert hermes_home({"HOME": str(tmp_path)}) == tmp_path / ".hermes"
    assert hermes_home({"HERMES_HOME": "", "HOME": str(tmp_path)}) == tmp_path / ".hermes"


def test_hermes_home_expands_tilde(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A leading ~ in $HERMES_HOME is expanded."""
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hermes_home({"HERMES_HOME": "~/alt"}) == tmp_path / "alt"


def test_default_profile_is_home_itself(tmp_path: Path) -> None:
    """None and "default" both mean the home directory."""
    assert profile_dir(tmp_path, None) == tmp_path
    assert profile_dir(tmp_path, "default") == tmp_path


def test_named_profile_lives_under_profiles(tmp_path: Path) -> None:
    """A named profile is home/profiles/<name> with its own state.db and config.yaml."""
    assert profile_dir(tmp_path, "work_2-b") == tmp_path / "profiles" / "work_2-b"
    assert state_db_path(tmp_path, "work") == tmp_path / "profiles" / "work" / "state.db"
    assert config_path(tmp_path, "work") == tmp_path / "profiles" / "work" / "config.yaml"
    assert state_db_path(tmp_path, None) == tmp_path / "state.db"
    assert config_path(tmp_path, None) == tmp_path / "config.yaml"


@pytest.mark.parametrize("name", ["", "../evil", "a/b", "has space", "dot.name", "ü"])
def test_bad_profile_names_are_rejected(tmp_path: Path, name: str) -> None:
    """Profile names other than letters, digits, - and _ raise ValidationError naming the name."""
    with pytest.raises(ValidationError, match="invalid profile name") as info:
        profile_dir(tmp_path, name)
    assert info.value.subject == name
