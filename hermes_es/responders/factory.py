"""Choose and configure the responder from config (the ``model`` section) and environment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from hermes_es.config import ModelConfig
from hermes_es.errors import ConfigError
from hermes_es.responders.base import Responder
from hermes_es.responders.offline import OfflineResponder
from hermes_es.responders.openai_compat import OpenAICompatResponder

PROVIDERS = ("offline", "openai")
"""Known values of ``model.provider``; ``offline`` is the default."""

_DEFAULTS = ModelConfig()
DEFAULT_TIMEOUT = _DEFAULTS.timeout
"""Seconds allowed for connecting and for each read when ``model.timeout`` is not set (the
default of ``ModelConfig.timeout``, the one place defaults live)."""

_MISSING = object()


def make_responder(config: Mapping[str, Any], env: Mapping[str, str]) -> Responder:
    """Return the responder ``config`` asks for; ``HERMES_RESPONDER=offline`` forces offline."""
    forced = env.get("HERMES_RESPONDER", "").strip().lower()
    if forced and forced not in PROVIDERS:
        raise ConfigError(
            f"HERMES_RESPONDER must be one of {', '.join(PROVIDERS)}, got {forced!r}",
            subject="HERMES_RESPONDER",
        )
    provider = forced or _provider(config)
    if provider == "offline":
        return OfflineResponder()
    return _openai_responder(config, env)


def _provider(config: Mapping[str, Any]) -> str:
    """Return the validated ``model.provider``."""
    value = _setting(config, "provider", "offline")
    if not isinstance(value, str) or value.strip().lower() not in PROVIDERS:
        raise ConfigError(
            f"model.provider must be one of {', '.join(PROVIDERS)}, got {value!r}",
            subject="model.provider",
        )
    return value.strip().lower()


def _openai_responder(config: Mapping[str, Any], env: Mapping[str, str]) -> OpenAICompatResponder:
    """Build the OpenAI-compatible responder from validated settings."""
    base_url = _string(config, "base_url", env.get("OPENAI_BASE_URL") or None)
    if base_url is None:
        raise ConfigError(
            "model.base_url is required when model.provider is openai "
            "(or set OPENAI_BASE_URL), e.g. http://127.0.0.1:8080/v1",
            subject="model.base_url",
        )
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"model.base_url must be an http:// or https:// URL with a host, got {base_url!r}",
            subject="model.base_url",
        )
    model = _string(config, "name", None)
    if model is None:
        raise ConfigError(
            "model.name is required when model.provider is openai", subject="model.name"
        )
    api_key = _string(config, "api_key", None, secret=True)
    if api_key is None:
        api_key = env.get("HERMES_API_KEY") or env.get("OPENAI_API_KEY") or None
    return OpenAICompatResponder(
        base_url,
        model,
        api_key=api_key,
        timeout=_timeout(config),
        max_retries=_max_retries(config),
        can_see_images=_flag(config, "can_see_images", default=_DEFAULTS.can_see_images),
        stream=_flag(config, "stream", default=_DEFAULTS.stream),
    )


def _setting(config: Mapping[str, Any], key: str, default: Any) -> Any:
    """Return ``model.<key>`` from a nested ``model`` mapping or a flat dotted key."""
    flat = config.get(f"model.{key}", _MISSING)
    if flat is not _MISSING:
        return flat
    section = config.get("model")
    if section is None:
        return default
    if not isinstance(section, Mapping):
        raise ConfigError(
            f"model must be a mapping of settings (provider, base_url, name, ...), "
            f"got {type(section).__name__}",
            subject="model",
        )
    return section.get(key, default)


def _string(
    config: Mapping[str, Any], key: str, default: str | None, *, secret: bool = False
) -> str | None:
    """Return ``model.<key>`` as a non-empty string, or ``default`` when unset or empty."""
    value = _setting(config, key, None)
    if value is None:
        return default
    if not isinstance(value, str):
        shown = type(value).__name__ if secret else f"{type(value).__name__} {value!r}"
        raise ConfigError(f"model.{key} must be a string, got {shown}", subject=f"model.{key}")
    return value.strip() or default


def _timeout(config: Mapping[str, Any]) -> float:
    """Return ``model.timeout`` in seconds: a positive number."""
    value = _setting(config, "timeout", DEFAULT_TIMEOUT)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(
            f"model.timeout must be a positive number of seconds, got {value!r}",
            subject="model.timeout",
        )
    return float(value)


def _max_retries(config: Mapping[str, Any]) -> int:
    """Return ``model.max_retries``: a whole number, zero or more."""
    value = _setting(config, "max_retries", _DEFAULTS.max_retries)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"model.max_retries must be a whole number >= 0, got {value!r}",
            subject="model.max_retries",
        )
    return value


def _flag(config: Mapping[str, Any], key: str, *, default: bool = False) -> bool:
    """Return ``model.<key>`` as a boolean."""
    value = _setting(config, key, default)
    if not isinstance(value, bool):
        raise ConfigError(
            f"model.{key} must be true or false, got {value!r}", subject=f"model.{key}"
        )
    return value
