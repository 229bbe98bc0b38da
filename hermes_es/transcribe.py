"""An audio transcriber backed by a command the user configures (``media.transcribe_command``).

The command is an argument list; ``{path}`` in any argument is replaced by the audio file's
path. Its standard output is the transcript. It runs without a shell, with a timeout, once per
attachment; a failure becomes a note on the attachment (the path is kept), never a crash.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from hermes_es.errors import ValidationError

Transcriber = Callable[[Path], str]


def command_transcriber(argv: Sequence[str], *, timeout: float = 120.0) -> Transcriber | None:
    """A transcriber running ``argv`` (with ``{path}`` filled in), or None when not configured."""
    if not argv:
        return None
    template = list(argv)
    if not any("{path}" in arg for arg in template):
        template.append("{path}")

    def transcribe(path: Path) -> str:
        command = [arg.replace("{path}", str(path)) for arg in template]
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError as exc:
            raise ValidationError(
                f"media.transcribe_command: {command[0]} was not found", subject=command[0]
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise ValidationError(
                f"media.transcribe_command timed out after {timeout:g}s on {path.name}",
                subject=str(path),
            ) from exc
        if done.returncode != 0:
            tail = (done.stderr or "").strip().splitlines()[-1:] or [""]
            raise ValidationError(
                f"media.transcribe_command exited {done.returncode} on {path.name}: {tail[0]}",
                subject=str(path),
            )
        transcript = done.stdout.strip()
        if not transcript:
            raise ValidationError(
                f"media.transcribe_command printed no transcript for {path.name}",
                subject=str(path),
            )
        return transcript

    return transcribe
