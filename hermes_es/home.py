"""Where hermes keeps its files: the home directory, profile directories, state.db and config.yaml.

``$HERMES_HOME`` (default ``~/.hermes``) is the default profile; a named profile lives in
``$HERMES_HOME/profiles/<name>/`` and has its own ``state.db`` and ``config.yaml``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from hermes_es.errors import ValidationError

DEFAULT_PROFILE = "default"
STATE_DB_NAME = "state.db"
CONFIG_NAME = "config.yaml"

_PROFILE_NAME = re.compile(r"[A-Za-z0-9_-]+")


def hermes_home(environ: Mapping[str, str] = os.environ) -> Path:
    """Return ``$HERMES_HOME`` if set and non-empty, else ``~/.hermes`` (``~`` from ``$HOME``)."""
    configured = environ.get("HERMES_HOME", "")
    if configured:
        return Path(configured).expanduser()
    user_home = environ.get("HOME", "")
    return (Path(user_home) if user_home else Path.home()) / ".hermes"


def validate_profile_name(profile: str) -> str:
    """Return ``profile`` if it is letters, digits, ``-`` and ``_`` only; else ValidationError."""
    if not _PROFILE_NAME.fullmatch(profile):
        raise ValidationError(
            f"invalid profile name {profile!r}: use letters, digits, '-' and '_' only",
            subject=profile,
        )
    return profile


def profile_dir(home: Path, profile: str | None) -> Path:
    """Directory of a profile: ``home`` for None/"default", else ``home/profiles/<name>``."""
    if profile is None or profile == DEFAULT_PROFILE:
        return home
    return home / "profiles" / validate_profile_name(profile)


def state_db_path(home: Path, profile: str | None) -> Path:
    """Path of the profile's ``state.db``."""
    return profile_dir(home, profile) / STATE_DB_NAME


def config_path(home: Path, profile: str | None) -> Path:
    """Path of the profile's ``config.yaml``."""
    return profile_dir(home, profile) / CONFIG_NAME
