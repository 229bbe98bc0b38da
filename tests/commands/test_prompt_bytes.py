"""The system prompt bytes a provider receives: stable across turns and restarts, rebuilt once.

End to end: real ``hermes`` processes talk to a local OpenAI-compatible HTTP server started by
the test, which records every request body. Each check compares the raw JSON bytes of the
system message found in those bodies, so nothing between the store and the wire can drift
unseen.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hermes_es.commands.chat import Chat
from hermes_es.commands.engine import SessionEngine
from hermes_es.config import load_config
from hermes_es.prompts.tools import tools_for_toolsets
from hermes_es.responders.factory import make_responder

ENTRY = "from hermes_es.cli import main; main()"
SOUL_V1 = "You are the first persona. Héllo — ünïcode survives.\n"
SOUL_V2 = "You are the second persona, written after the session started.\n"


@dataclass
class Provider:
    """A local chat-completions endpoint that records every request body it receives."""

    url: str = ""
    bodies: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def system_bytes(self, user_text: str) -> bytes:
        """The raw wire bytes of the system message in the one request that carried user_text."""
        with self.lock:
            matching = [raw for raw in self.bodies if _last_user(raw) == user_text]
        assert len(matching) == 1, f"expected one request for {user_text!r}, got {len(matching)}"
        return _system_segment(matching[0])


def _decoded(raw: bytes) -> dict[str, Any]:
    """A request body as JSON."""
    body = msgspec.json.decode(raw)
    assert isinstance(body, dict)
    return body


def _last_user(raw: bytes) -> str:
    """The text of the last user message in a request body."""
    users = [m for m in _decoded(raw)["messages"] if m.get("role") == "user"]
    return str(users[-1]["content"]) if users else ""


def _system_segment(raw: bytes) -> bytes:
    """The system message exactly as it appears in the raw body (asserted to be there)."""
    first = _decoded(raw)["messages"][0]
    assert first["role"] == "system"
    segment = msgspec.json.encode(first)
    assert segment in raw, "the system message is not serialised verbatim in the request"
    return segment


def _text(segment: bytes) -> str:
    """The system prompt text carried by a raw system-message segment."""
    message = msgspec.json.decode(segment)
    assert isinstance(message, dict)
    return str(message["content"])


def _completion(text: str) -> bytes:
    """A minimal chat-completions response."""
    return msgspec.json.encode(
        {
            "model": "test",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 2},
        }
    )


@pytest.fixture()
def provider() -> Iterator[Provider]:
    """A recording OpenAI-compatible server on 127.0.0.1."""
    recorder = Provider()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with recorder.lock:
                recorder.bodies.append(raw)
            reply = _completion("ok")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture()
def home(tmp_path: Path, provider: Provider) -> Path:
    """A HERMES_HOME whose config points at the provider, with a SOUL.md and a workspace."""
    root = tmp_path / "home"
    root.mkdir()
    (root / "config.yaml").write_text(
        f"model:\n  provider: openai\n  base_url: {provider.url}\n  name: test\n  timeout: 10\n"
    )
    (root / "SOUL.md").write_text(SOUL_V1, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    (work / "AGENTS.md").write_text("Project rule: keep answers short.\n")
    return root


def hermes(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run one real hermes process (a restart each time) from the workspace, stdin not a tty."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    env["HERMES_HOME"] = str(home)
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        cwd=home.parent / "work",
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def new_session(home: Path, text: str) -> str:
    """Start a session with one turn through ``hermes chat -q``; return its id."""
    done = hermes(home, "chat", "-q", text)
    found = re.search(r"Session: (\S+)", done.stdout + done.stderr)
    assert found is not None, done.stderr
    return found.group(1)


def turn(home: Path, sid: str, text: str) -> None:
    """One more turn of ``sid`` in a fresh process: ``hermes -r ID -q TEXT``."""
    hermes(home, "-r", sid, "-q", text)


def stored(home: Path, sid: str) -> tuple[str | None, list[str] | None]:
    """A session's stored prompt text and tools pin, read from the store."""
    with SessionEngine.open(home) as engine:
        return engine.stored_prompt(sid), engine.get(sid).tools


def test_turns_and_restarts_send_identical_system_bytes(home: Path, provider: Provider) -> None:
    """Every turn of a session, each in a new process, sends the same system bytes as stored."""
    sid = new_session(home, "turn one")
    for text in ("turn two", "turn three", "turn four"):
        turn(home, sid, text)
    segments = [provider.system_bytes(f"turn {n}") for n in ("one", "two", "three", "four")]
    assert len(set(segments)) == 1
    prompt, _ = stored(home, sid)
    assert prompt is not None and _text(segments[0]).encode("utf-8") == prompt.encode("utf-8")
    assert "Héllo — ünïcode survives." in prompt and "keep answers short" in prompt


def test_soul_edit_without_refresh_changes_nothing(home: Path, provider: Provider) -> None:
    """Editing SOUL.md after a session started leaves the bytes its later turns send alone."""
    sid = new_session(home, "before edit")
    (home / "SOUL.md").write_text(SOUL_V2, encoding="utf-8")
    turn(home, sid, "after edit")
    turn(home, sid, "after edit again")
    before = provider.system_bytes("before edit")
    assert provider.system_bytes("after edit") == before
    assert provider.system_bytes("after edit again") == before
    assert "second persona" not in _text(before)


def test_refresh_rebuilds_exactly_once_for_the_targeted_session(
    home: Path, provider: Provider
) -> None:
    """A targeted refresh changes the next turn's bytes once; later turns and others keep theirs."""
    target = new_session(home, "target first")
    other = new_session(home, "other first")
    old = provider.system_bytes("target first")
    assert provider.system_bytes("other first") == old
    _, target_tools = stored(home, target)
    (home / "SOUL.md").write_text(SOUL_V2, encoding="utf-8")

    refreshed = hermes(home, "sessions", "refresh-prompts", "--session", target)
    assert "1 session holds a stored prompt" in refreshed.stdout
    turn(home, target, "target rebuilt")
    turn(home, target, "target later")
    turn(home, target, "target much later")
    turn(home, other, "other after refresh")

    rebuilt = provider.system_bytes("target rebuilt")
    assert rebuilt != old
    assert "second persona" in _text(rebuilt) and "first persona" not in _text(rebuilt)
    assert provider.system_bytes("target later") == rebuilt
    assert provider.system_bytes("target much later") == rebuilt
    assert provider.system_bytes("other after refresh") == old
    target_text, tools_after = stored(home, target)
    assert target_text is not None and target_text.encode("utf-8") == _text(rebuilt).encode()
    assert tools_after == target_tools
    other_text, _ = stored(home, other)
    assert other_text is not None and other_text.encode("utf-8") == _text(old).encode()


def test_turns_within_one_process_and_after_reopen_send_identical_bytes(
    home: Path, provider: Provider
) -> None:
    """The Chat use case sends the same system bytes every turn, also after reopening the store."""
    loaded = load_config(home / "config.yaml")
    tools = tools_for_toolsets(loaded.config.toolsets)
    workspace = home.parent / "work"

    def chat_on(engine: SessionEngine, sid: str) -> Chat:
        return Chat(
            engine,
            sid,
            responder=make_responder(loaded.raw, {}),
            config=loaded.config,
            profile_dir=home,
            tools=tools,
            workspace=workspace,
        )

    with SessionEngine.open(home) as engine:
        sid = engine.start_session("cli", cwd=str(workspace))
        chat = chat_on(engine, sid)
        for n in range(3):
            chat.send(f"in-process {n}")
    with SessionEngine.open(home) as engine:
        chat_on(engine, sid).send("after reopen")
    segments = {provider.system_bytes(f"in-process {n}") for n in range(3)}
    segments.add(provider.system_bytes("after reopen"))
    assert len(segments) == 1
    assert "first persona" in _text(segments.pop())
