"""config.yaml: load it, validate it into typed Structs, and spot legacy settings core ignores.

A missing file means defaults. A value of the wrong type is a ``ConfigError`` naming the file and
the exact location (``at $.sessions.max_export_messages``). Unknown keys are not fatal: they are
listed in ``LoadedConfig.unknown_keys`` so ``hermes doctor`` can report them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from hermes_es.errors import ConfigError
from hermes_es.home import config_path

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[int, msgspec.Meta(ge=1)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
"""Reasoning efforts ``model.reasoning_effort`` and ``/reasoning`` accept."""


class ModelConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The model endpoint new sessions use (each default here is the only one)."""

    provider: str = "offline"
    """``offline`` (built in, no network) or ``openai`` (any chat-completions endpoint)."""
    name: str = "hermes-offline"
    """Model name sent to the endpoint."""
    base_url: str = ""
    """Endpoint base URL, e.g. ``http://127.0.0.1:8080/v1`` (or ``OPENAI_BASE_URL``)."""
    api_key: str = ""
    """Bearer key (else ``HERMES_API_KEY`` or ``OPENAI_API_KEY``)."""
    timeout: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    """Seconds allowed for connecting and for each read."""
    max_retries: NonNegative = 0
    """Retries of a failed request (network errors, timeouts, 408/409/429/5xx)."""
    can_see_images: bool = False
    """Send image attachments as image parts (else a one-time text description is kept)."""
    stream: bool = True
    """Stream replies as they arrive (server-sent events)."""
    reasoning_effort: ReasoningEffort = "medium"
    """Reasoning effort sent from a session's first turn (``/reasoning`` changes it)."""


class DisplayConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How the CLI shows things."""

    resume_display: Literal["full", "minimal"] = "full"


class SessionConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Per-session CLI behaviour."""

    terminal_continue: bool = True


class SessionsConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Guards and housekeeping for the session store."""

    max_export_messages: NonNegative = 20000
    """Per-session cap for JSON/JSONL backups and /save json; 0 disables the guard."""
    max_import_messages: NonNegative = 20000
    """Per-session cap for imports; 0 disables the guard."""
    max_message_bytes: NonNegative = 2 * 1024 * 1024  # aggregates.validation's default
    """Largest single message (UTF-8 bytes of text, reasoning and tool-call arguments) an
    append or edit accepts; 0 disables the limit."""
    auto_archive: NonNegativeFloat = 0.0
    """Idle days before the sweep archives a chat (fractions allowed); 0 turns it off."""
    compress_mode: Literal["in_place", "split"] = "split"
    compress_keep_last: NonNegative = 10
    orphan_end_grace_s: NonNegative = 300


class DashboardConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Gateway/dashboard orphan handling."""

    ws_orphan_reap_grace_s: NonNegative = 300
    startup_orphan_sweep: bool = True


def _default_toolsets() -> list[str]:
    return ["core"]


class MediaConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How attachments are turned into text."""

    transcribe_command: list[str] = msgspec.field(default_factory=list)
    """Audio transcriber: an argument list, ``{path}`` replaced by the file (empty: none)."""
    transcribe_timeout: Annotated[float, msgspec.Meta(gt=0)] = 120.0
    """Seconds the transcriber may run per file."""


class StoreConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Where the session store lives."""

    url: str = ""
    """A ``postgresql://`` URL or a file path; empty: the profile's state.db."""


class GatewayConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How the CLI reaches a team of gateways on one PostgreSQL profile."""

    team_homes: list[str] = msgspec.field(default_factory=list)
    """Profile directories of the team's other gateways (each its own ticket source): the CLI
    attaches to whichever of them (or this profile's own) owns the profile now."""


class HermesConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The whole validated config.yaml."""

    model: ModelConfig = msgspec.field(default_factory=ModelConfig)
    display: DisplayConfig = msgspec.field(default_factory=DisplayConfig)
    session: SessionConfig = msgspec.field(default_factory=SessionConfig)
    sessions: SessionsConfig = msgspec.field(default_factory=SessionsConfig)
    dashboard: DashboardConfig = msgspec.field(default_factory=DashboardConfig)
    media: MediaConfig = msgspec.field(default_factory=MediaConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    gateway: GatewayConfig = msgspec.field(default_factory=GatewayConfig)
    toolsets: list[str] = msgspec.field(default_factory=_default_toolsets)
    mcp_servers: dict[str, Any] = msgspec.field(default_factory=dict)
    terminal: dict[str, Any] = msgspec.field(default_factory=dict)
    max_turns: Positive = 90
    checkpoints: dict[str, Any] | bool = msgspec.field(default_factory=dict)
    skills: dict[str, Any] = msgspec.field(default_factory=dict)


class LoadedConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A validated config plus what was in the file but not understood."""

    config: HermesConfig
    path: str
    exists: bool
    raw: dict[str, Any]
    unknown_keys: list[str] = msgspec.field(default_factory=list)
    warnings: list[str] = msgspec.field(default_factory=list)


# Top-level keys that are read elsewhere (legacy detection) and so are not "unknown".
LEGACY_KEYS = frozenset({"session_reset", "reset_policy"})

# Config parts a resumed idle session picks up from the profile's current config.
PICKUP_KEYS: tuple[str, ...] = (
    "toolsets",
    "mcp_servers",
    "terminal",
    "max_turns",
    "checkpoints",
    "model.reasoning_effort",
)


def _struct_sections() -> dict[str, type[msgspec.Struct]]:
    """Top-level keys whose value is a Struct, so their own keys can be checked."""
    sections: dict[str, type[msgspec.Struct]] = {}
    for field in msgspec.structs.fields(HermesConfig):
        if isinstance(field.type, type) and issubclass(field.type, msgspec.Struct):
            sections[field.name] = field.type
    return sections


def _read_yaml(path: Path) -> Any:
    """Parse a YAML file, turning read and syntax failures into ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 ({exc.reason})", subject=str(path)) from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})", subject=str(path)) from exc
    import yaml  # only when a config file exists: a missing config costs no YAML import

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}", subject=str(path)) from exc


def _drop_nulls(
    raw: dict[str, Any], sections: Mapping[str, type[msgspec.Struct]]
) -> dict[str, Any]:
    """Treat ``key:`` with no value (null) as absent at top level and inside Struct sections."""
    cleaned: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            continue
        if key in sections and isinstance(value, dict):
            value = {k: v for k, v in value.items() if v is not None}
        cleaned[key] = value
    return cleaned


def _unknown_keys(
    raw: Mapping[str, Any], sections: Mapping[str, type[msgspec.Struct]]
) -> list[str]:
    """Dotted paths of keys the typed config does not know."""
    known_top = set(HermesConfig.__struct_fields__) | LEGACY_KEYS
    unknown: list[str] = []
    for key, value in raw.items():
        if key not in known_top:
            unknown.append(str(key))
        elif key in sections and isinstance(value, dict):
            known = set(sections[key].__struct_fields__)
            unknown.extend(f"{key}.{sub}" for sub in value if sub not in known)
    return unknown


def parse_config(raw: Any, *, source: str) -> LoadedConfig:
    """Validate an already-parsed YAML document (``source`` names it in errors)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{source}: expected a mapping at the top level, got {type(raw).__name__}",
            subject=source,
        )
    non_string = [repr(k) for k in raw if not isinstance(k, str)]
    if non_string:
        raise ConfigError(
            f"{source}: top-level keys must be strings, got {', '.join(non_string)}",
            subject=source,
        )
    sections = _struct_sections()
    try:
        config = msgspec.convert(_drop_nulls(raw, sections), HermesConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{source}: {exc}", subject=source) from exc
    unknown = _unknown_keys(raw, sections)
    warnings = [f"{source}: unknown key {key!r} is ignored" for key in unknown]
    warnings.extend(legacy_reset_findings(raw, {}))
    return LoadedConfig(
        config=config,
        path=source,
        exists=True,
        raw=raw,
        unknown_keys=unknown,
        warnings=warnings,
    )


def load_config(path: Path) -> LoadedConfig:
    """Load and validate ``path``; a missing file gives the defaults."""
    if not path.exists():
        return LoadedConfig(config=HermesConfig(), path=str(path), exists=False, raw={})
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, expected a YAML file", subject=str(path))
    return parse_config(_read_yaml(path), source=str(path))


def load_profile_config(home: Path, profile: str | None) -> LoadedConfig:
    """Load the config.yaml of ``profile`` (None or "default" = ``home`` itself)."""
    return load_config(config_path(home, profile))


# --- legacy session-reset settings -----------------------------------------------------------

RESET_PLUGIN = "hermes-session-reset-policy"
_RESET_MODES = frozenset({"idle", "daily", "both"})
_RESET_ENV_PREFIXES = ("HERMES_SESSION_RESET", "SESSION_RESET_", "HERMES_RESET_")


def _legacy_message(what: str) -> str:
    """One finding: what was found, what core does instead, and how to keep the old behaviour."""
    return (
        f"{what}: sessions never reset on their own and core ignores this setting; "
        f"to keep time-based resets install the {RESET_PLUGIN} plugin "
        f"(hermes plugins install {RESET_PLUGIN})"
    )


def _find_key_paths(node: Any, key: str, prefix: str) -> Iterable[str]:
    """Dotted paths of every ``key`` anywhere in a nested mapping/list tree."""
    if isinstance(node, dict):
        for name, value in node.items():
            path = f"{prefix}.{name}" if prefix else str(name)
            if name == key:
                yield path
            else:
                yield from _find_key_paths(value, key, path)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _find_key_paths(value, key, f"{prefix}[{index}]")


def _session_reset_findings(block: Any) -> list[str]:
    """Findings for the top-level ``session_reset`` block."""
    if isinstance(block, str):
        block = {"mode": block}
    if not isinstance(block, dict):
        return []
    findings: list[str] = []
    mode = block.get("mode")
    if isinstance(mode, str) and mode.strip().lower() in _RESET_MODES:
        findings.append(_legacy_message(f"config sets session_reset.mode: {mode}"))
    for name, value in block.items():
        if name == "mode":
            continue
        # Per-platform / per-type overrides can switch resets on even when the mode is "none";
        # plain parameters (idle_minutes, at_hour) only matter when the mode is not "none".
        if isinstance(value, dict) or mode is None:
            findings.append(_legacy_message(f"config sets session_reset.{name}"))
    return findings


def legacy_reset_findings(config_raw: Mapping[str, Any], environ: Mapping[str, str]) -> list[str]:
    """Warnings for legacy reset settings in config and environment (doctor, gateway start)."""
    findings = _session_reset_findings(config_raw.get("session_reset"))
    findings.extend(
        _legacy_message(f"config sets {path}")
        for path in _find_key_paths(dict(config_raw), "reset_policy", "")
    )
    for name in sorted(environ):
        if name.upper().startswith(_RESET_ENV_PREFIXES) and environ[name] != "":
            findings.append(_legacy_message(f"environment variable {name} is set"))
    return findings


# --- pickup fingerprint ----------------------------------------------------------------------


def _lookup(tree: Mapping[str, Any], dotted: str) -> Any:
    """Value at a dotted path in builtins, or None when a part is missing."""
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def config_fingerprint(cfg: HermesConfig, keys: Sequence[str] = PICKUP_KEYS) -> dict[str, Any]:
    """The ``keys`` (dotted paths) of ``cfg`` as plain, key-sorted JSON-able values."""
    tree = msgspec.to_builtins(cfg)
    canonical = {key: _lookup(tree, key) for key in keys}
    # A JSON round trip with sorted keys makes nested dict order irrelevant.
    return dict(json.loads(json.dumps(canonical, sort_keys=True, default=str)))


def fingerprint_digest(fingerprint: Mapping[str, Any]) -> str:
    """A sha256 hex digest of a fingerprint, for storing on a session."""
    encoded = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()


def changed_pickup_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Keys whose value differs between two fingerprints, in ``new``'s order then ``old``'s."""
    keys = list(new) + [key for key in old if key not in new]
    return [key for key in keys if old.get(key) != new.get(key)]
