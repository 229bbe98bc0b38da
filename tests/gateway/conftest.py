"""Fixtures for gateway tests: the gateway as a real subprocess, and a slow local model endpoint.

The slow endpoint speaks the OpenAI chat-completions protocol on 127.0.0.1; a prompt containing
``SLOW`` is held until the test releases it, so a gateway can be killed or stopped mid-turn.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hermes_es.gateway.client import GatewayHandle, running_gateway
from hermes_es.gateway.paths import GatewayPaths

START_TIMEOUT = 60.0


class SlowModel:
    """A local chat-completions endpoint; prompts containing SLOW wait for ``release``."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.release = threading.Event()
        self.arrived = threading.Event()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                last = [m for m in body.get("messages", []) if m.get("role") == "user"][-1]
                text = str(last.get("content", ""))
                model.prompts.append(text)
                if "SLOW" in text:
                    model.arrived.set()
                    model.release.wait(60)
                reply = {
                    "id": "c1",
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": f"echo: {text}"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
                }
                data = json.dumps(reply).encode()
                try:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the gateway was killed while we held the answer

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """The base URL (``…/v1``)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def count(self, text: str) -> int:
        """How many requests ended with the user prompt ``text``."""
        return sum(1 for p in self.prompts if p == text)

    def close(self) -> None:
        """Stop serving."""
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


ENTRY = "from hermes_es.cli import main; main()"
"""The real ``hermes`` program, as ``python -c ENTRY``."""


def hermes(
    env: dict[str, str], *args: str, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """Run the real ``hermes`` program in ``HERMES_HOME``, its output captured."""
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        env=env,
        cwd=env["HERMES_HOME"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def slow_model() -> Iterator[SlowModel]:
    """A slow OpenAI-compatible endpoint on 127.0.0.1."""
    model = SlowModel()
    yield model
    model.close()


def write_config(home: Path, text: str) -> None:
    """Write ``config.yaml`` in ``home``."""
    (home / "config.yaml").write_text(text, encoding="utf-8")


def model_config(model: SlowModel, extra: str = "") -> str:
    """A config.yaml using the slow endpoint."""
    return (
        f"model:\n  provider: openai\n  base_url: {model.url}\n  name: slow\n"
        f"  timeout: 60\n  max_retries: 0\n{extra}"
    )


class GatewayProcess:
    """A ``hermes gateway run`` subprocess on a HERMES_HOME."""

    def __init__(self, home: Path, env: dict[str, str], args: tuple[str, ...] = ()) -> None:
        self.home = home
        self.env = env
        self.args = args
        """Extra ``gateway run`` options (e.g. ``--store URL``)."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = home / "gateway-test.log"

    def start(self) -> GatewayHandle:
        """Start it and wait until gateway.json names it."""
        paths = GatewayPaths(self.home)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from hermes_es.cli import main; main()",
                    "gateway",
                    "run",
                    "--drain",
                    "20",
                    *self.args,
                ],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            handle = running_gateway(self.home)
            if handle is not None and handle.endpoint.pid == self.proc.pid:
                return handle
            if self.proc.poll() is not None:
                raise AssertionError(f"gateway exited: {self.log.read_text()}")
            time.sleep(0.05)
        raise AssertionError(f"gateway not ready: {self.log.read_text()}")
        _ = paths

    def kill9(self) -> None:
        """SIGKILL it (a crash) and wait."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM it and return its exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def output(self) -> str:
        """What it printed."""
        return self.log.read_text(encoding="utf-8", errors="replace")


@pytest.fixture
def gw_env(home: Path) -> dict[str, str]:
    """Environment for hermes subprocesses on ``home`` (no legacy reset variables)."""
    env = {k: v for k, v in os.environ.items() if "RESET" not in k.upper()}
    env.update(HERMES_HOME=str(home), HERMES_RESPONDER="", COLUMNS="200")
    env.pop("HERMES_NO_GATEWAY", None)
    return env


@pytest.fixture
def gateway(home: Path, gw_env: dict[str, str]) -> Iterator[GatewayProcess]:
    """A gateway process on ``home`` (started by the test); stopped at teardown."""
    process = GatewayProcess(home, gw_env)
    yield process
    if process.proc is not None and process.proc.poll() is None:
        process.proc.kill()
        process.proc.wait(10)
