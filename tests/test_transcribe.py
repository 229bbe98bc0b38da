"""The configured audio transcriber: a real command, its failures, and the config key."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hermes_es.config import load_config
from hermes_es.errors import ValidationError
from hermes_es.media import describe_attachment
from hermes_es.transcribe import command_transcriber

FAKE = "import sys; print('transcript of', sys.argv[1].rsplit('/', 1)[-1])"


def audio(tmp_path: Path) -> Path:
    """A small file with an audio extension."""
    path = tmp_path / "memo.wav"
    path.write_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt " + b"\x00" * 64)
    return path


def test_transcript_comes_from_the_configured_command(tmp_path: Path) -> None:
    """The command's stdout becomes the attachment's text; {path} is filled in."""
    transcribe = command_transcriber([sys.executable, "-c", FAKE, "{path}"])
    assert transcribe is not None
    att = describe_attachment(
        audio(tmp_path), can_see_images=False, describe_image=None, transcriber=transcribe
    )
    assert att.kind == "audio" and att.text == "transcript of memo.wav"


def test_no_command_means_no_transcriber(tmp_path: Path) -> None:
    """Without media.transcribe_command only the path of an audio file is kept."""
    assert command_transcriber([]) is None
    att = describe_attachment(
        audio(tmp_path), can_see_images=False, describe_image=None, transcriber=None
    )
    assert att.text is None and "no transcriber" in att.note


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["/nonexistent/transcriber"], "was not found"),
        ([sys.executable, "-c", "import sys; sys.exit(3)"], "exited 3"),
        ([sys.executable, "-c", "pass"], "printed no transcript"),
    ],
)
def test_a_failing_command_is_a_clear_error(tmp_path: Path, argv: list[str], message: str) -> None:
    """A missing, failing or silent command raises a ValidationError naming what went wrong."""
    transcribe = command_transcriber(argv)
    assert transcribe is not None
    with pytest.raises(ValidationError, match=message):
        transcribe(audio(tmp_path))


def test_transcribe_command_is_read_from_config(tmp_path: Path) -> None:
    """media.transcribe_command and media.transcribe_timeout are typed config keys."""
    path = tmp_path / "config.yaml"
    path.write_text("media: {transcribe_command: [whisper, '{path}'], transcribe_timeout: 30}\n")
    loaded = load_config(path)
    assert loaded.config.media.transcribe_command == ["whisper", "{path}"]
    assert loaded.config.media.transcribe_timeout == 30
    assert loaded.unknown_keys == []
