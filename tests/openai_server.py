"""A local OpenAI-compatible chat-completions server for tests (real HTTP on 127.0.0.1).

It records every request body, answers from a small deterministic "model", streams server-sent
events when the request asks for ``stream``, calls tools, and has a strict mode that rejects a
request whose messages leave a tool call unanswered (as OpenAI does).

The model: a pending user message ``read PATH`` (or ``list PATH``) calls ``read_file``
(``list_directory``) with that path; a window ending in tool results answers
``Tool said: <first result line>``; any other user message is answered ``echo: <text>``. A
user message ``slow N`` streams N pieces, one every ``slow_delay`` seconds.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STRICT_ERROR = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to "
    "each 'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)


@dataclass
class FakeModel:
    """The server's state: requests seen, strictness, streaming pace."""

    base_url: str = ""
    strict: bool = False
    slow_delay: float = 0.3
    requests: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def answer(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]], int]:
        """(text, tool calls, pieces to stream) for a request body."""
        messages = body["messages"]
        last = messages[-1]
        if last["role"] == "tool":
            results = []
            for m in reversed(messages):
                if m["role"] != "tool":
                    break
                results.insert(0, m)
            text = _text(results[0]["content"]).strip().splitlines()
            return f"Tool said: {text[0] if text else ''}", [], 3
        text = _text(last.get("content") or "")
        word, _, rest = text.partition(" ")
        if word in ("read", "list") and rest:
            name = "read_file" if word == "read" else "list_directory"
            call = {
                "id": f"call_{len(self.requests)}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps({"path": rest.strip()})},
            }
            return "", [call], 1
        if word == "slow":
            return " ".join(f"piece{i}" for i in range(int(rest or "5"))), [], int(rest or "5")
        return f"echo: {text}", [], 2

    def strict_problem(self, messages: list[dict[str, Any]]) -> str | None:
        """Why a strict endpoint rejects these messages, or None."""
        for index, m in enumerate(messages):
            calls = m.get("tool_calls") or []
            if m["role"] == "assistant" and calls:
                wanted = [c["id"] for c in calls]
                following = []
                for later in messages[index + 1 :]:
                    if later["role"] != "tool":
                        break
                    following.append(later.get("tool_call_id"))
                missing = [i for i in wanted if i not in following]
                if missing:
                    return STRICT_ERROR.format(ids=", ".join(missing))
            if m["role"] == "tool":
                before = messages[:index]
                owner = next((p for p in reversed(before) if p["role"] != "tool"), None)
                ids = [c["id"] for c in (owner or {}).get("tool_calls") or []]
                if m.get("tool_call_id") not in ids:
                    return (
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'."
                    )
        return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))


def _pieces(text: str, count: int) -> list[str]:
    if not text:
        return []
    count = max(1, min(count, len(text)))
    size = -(-len(text) // count)
    return [text[i : i + size] for i in range(0, len(text), size)]


@contextmanager
def fake_model(*, strict: bool = False, slow_delay: float = 0.3) -> Iterator[FakeModel]:
    """Run the server on 127.0.0.1 (an ephemeral port) for the duration of the block."""
    state = FakeModel(strict=strict, slow_delay=slow_delay)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = json.loads(raw)
            state.requests.append(body)
            if state.strict:
                problem = state.strict_problem(body["messages"])
                if problem:
                    state.rejected.append(problem)
                    self._json(400, {"error": {"message": problem, "type": "invalid_request"}})
                    return
            text, calls, pieces = state.answer(body)
            usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            if not body.get("stream"):
                message: dict[str, Any] = {"role": "assistant", "content": text or None}
                if calls:
                    message["tool_calls"] = calls
                reason = "tool_calls" if calls else "stop"
                self._json(
                    200,
                    {
                        "id": "cmpl",
                        "object": "chat.completion",
                        "model": body["model"],
                        "choices": [{"index": 0, "message": message, "finish_reason": reason}],
                        "usage": usage,
                    },
                )
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            slow = _text(body["messages"][-1].get("content") or "").startswith("slow")
            try:
                self._event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
                for piece in _pieces(text, pieces):
                    self._event({"choices": [{"index": 0, "delta": {"content": piece}}]})
                    if slow and state.stop.wait(state.slow_delay):
                        return
                for index, call in enumerate(calls):
                    head = {"index": index, "id": call["id"], "type": "function"}
                    head["function"] = {"name": call["function"]["name"], "arguments": ""}
                    self._event({"choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})
                    args = call["function"]["arguments"]
                    for part in (args[: len(args) // 2], args[len(args) // 2 :]):
                        frag = {"index": index, "function": {"arguments": part}}
                        self._event({"choices": [{"index": 0, "delta": {"tool_calls": [frag]}}]})
                reason = "tool_calls" if calls else "stop"
                self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
                self._event({"choices": [], "usage": usage, "model": body["model"]})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except OSError:
                return  # the client went away (a cancelled stream)

        def _event(self, data: dict[str, Any]) -> None:
            self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
            self.wfile.flush()

        def _json(self, status: int, data: dict[str, Any]) -> None:
            payload = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        state.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        time.sleep(0)
