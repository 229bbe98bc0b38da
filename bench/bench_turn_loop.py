"""Turn-runner benchmark: streamed turns and tool round trips against a local endpoint.

A stdlib HTTP server on 127.0.0.1 speaks the chat-completions streaming protocol (server-sent
events): a user message ``read F`` is answered with a ``read_file`` call, a window ending in a
tool result with a reply in five pieces, anything else with an echo in five pieces. Figures
(medians over ``--turns`` turns, one warm-up):

- ``floor_sse_round_trip``: one bare httpx POST reading the whole event stream (the floor);
- ``streamed_turn``: ``Chat.send`` of a plain message (prompt, user append, one streamed model
  call, atomic record), ratio to one floor round trip;
- ``tool_turn``: ``Chat.send`` that runs ``read_file`` (two streamed model calls, the tool, the
  atomic four-message turn), ratio to two floor round trips.

Run: ``python -m bench.bench_turn_loop [--turns 200] [--quick]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from bench.common import emit, log, ratio
from hermes_es.commands.chat import Chat
from hermes_es.commands.engine import SessionEngine
from hermes_es.config import HermesConfig
from hermes_es.responders.openai_compat import OpenAICompatResponder

BENCH = "bench_turn_loop"


def _events(body: dict[str, Any]) -> list[dict[str, Any]]:
    last = body["messages"][-1]
    text = last.get("content") or ""
    if last["role"] == "user" and isinstance(text, str) and text.startswith("read "):
        call = {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": text[5:]})},
        }
        delta: dict[str, Any] = {"tool_calls": [call]}
        return [{"choices": [{"index": 0, "delta": delta, "finish_reason": "tool_calls"}]}]
    reply = "the answer, streamed in five parts" if last["role"] == "tool" else f"echo: {text}"
    size = -(-len(reply) // 5)
    out = [
        {"choices": [{"index": 0, "delta": {"content": reply[i : i + size]}}]}
        for i in range(0, len(reply), size)
    ]
    out.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return out


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16  # headers and body leave in one segment (no delayed-ACK stall)
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        payload = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in _events(body))
        payload += b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> None:
    """Run the three figures and print one JSON line each."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    turns = 30 if args.quick else args.turns
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            (work / "notes.txt").write_text("buy milk\n" * 20)
            body = json.dumps(
                {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            ).encode()
            floor: list[float] = []
            with httpx.Client(trust_env=False) as client:
                for _ in range(turns + 1):
                    t0 = time.perf_counter()
                    client.post(base + "/chat/completions", content=body).read()
                    floor.append(time.perf_counter() - t0)
            floor_ms = _median_ms(floor[1:])
            emit(BENCH, "floor_sse_round_trip", median_ms=round(floor_ms, 3), n=turns)
            with SessionEngine.open(work / "state.db") as engine:
                responder = OpenAICompatResponder(base, "m", stream=True)
                for figure, text, calls in (
                    ("streamed_turn", "hello there", 1),
                    ("tool_turn", "read notes.txt", 2),
                ):
                    sid = engine.start_session("cli", tools=["read_file"], cwd=str(work))
                    chat = Chat(
                        engine, sid, responder=responder, config=HermesConfig(),
                        profile_dir=work, tools=["read_file"], workspace=work,
                    )  # fmt: skip
                    samples: list[float] = []
                    for i in range(turns + 1):
                        t0 = time.perf_counter()
                        chat.send(f"{text} {i}" if calls == 1 else text)
                        samples.append(time.perf_counter() - t0)
                    ms = _median_ms(samples[1:])
                    log(f"{figure}: {ms:.2f} ms median over {turns} turns")
                    emit(
                        BENCH, figure, median_ms=round(ms, 3), n=turns, model_calls=calls,
                        ratio_to_floor=ratio(ms, floor_ms * calls),
                    )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
