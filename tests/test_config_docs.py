"""Every config key the code reads is known to doctor and documented in the README, with one
default per key."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import yaml

from hermes_es.config import HermesConfig, ModelConfig, parse_config
from hermes_es.responders.factory import make_responder
from hermes_es.responders.openai_compat import OpenAICompatResponder

README = Path(__file__).resolve().parents[1] / "README.md"


def _readme_config() -> dict[str, object]:
    text = README.read_text(encoding="utf-8")
    block = text.split("Configuration lives in", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    loaded = yaml.safe_load(block)
    assert isinstance(loaded, dict)
    return loaded


def test_readme_config_block_is_valid_and_complete() -> None:
    """The README's config block parses with no unknown key and names every known key."""
    documented = _readme_config()
    loaded = parse_config(documented, source="README.md")
    assert loaded.unknown_keys == []
    for field in msgspec.structs.fields(HermesConfig):
        assert field.name in documented, f"README lacks {field.name}"
        if isinstance(field.type, type) and issubclass(field.type, msgspec.Struct):
            section = documented[field.name]
            assert isinstance(section, dict)
            missing = set(field.type.__struct_fields__) - set(section)
            assert not missing, f"README lacks {field.name}.{sorted(missing)}"


def test_readme_model_defaults_are_the_code_defaults() -> None:
    """Each model.* default the README shows is the one ModelConfig holds."""
    documented = _readme_config()["model"]
    assert isinstance(documented, dict)
    assert documented == msgspec.to_builtins(ModelConfig())


def test_every_model_key_the_factory_reads_is_known_to_doctor() -> None:
    """model.timeout, max_retries, can_see_images and stream are known keys, not 'unknown'."""
    factory = Path(make_responder.__code__.co_filename).read_text(encoding="utf-8")
    read = set(re.findall(r'_(?:setting|string|flag)\(config, "([a-z_]+)"', factory))
    assert {"timeout", "max_retries", "can_see_images", "stream"} <= read
    assert read <= set(ModelConfig.__struct_fields__)
    raw = {"model": {k: v for k, v in msgspec.to_builtins(ModelConfig()).items() if k in read}}
    assert parse_config(raw, source="config.yaml").unknown_keys == []


def test_factory_falls_back_to_the_config_defaults() -> None:
    """An openai responder built without those keys uses ModelConfig's defaults."""
    config = {"model": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "name": "m"}}
    responder = make_responder(config, {})
    assert isinstance(responder, OpenAICompatResponder)
    defaults = ModelConfig()
    assert (responder.timeout, responder.max_retries, responder.stream) == (
        defaults.timeout,
        defaults.max_retries,
        defaults.stream,
    )
    assert responder.can_see_images is defaults.can_see_images
