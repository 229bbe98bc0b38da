"""The OpenAI-compatible responder against a real local HTTP server, and the responder factory."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec
import pytest

from hermes_es.errors import ConfigError, ResponderError
from hermes_es.responders.base import ChatMessage, ToolCall
from hermes_es.responders.factory import make_responder
from hermes_es.responders.offline import OfflineResponder
from hermes_es.responders.openai_compat import SUMMARY_PROMPT, OpenAICompatResponder

KEY = "sk-test-SECRET-0123456789"


@dataclass
class Reply:
    """One planned answer of the fake endpoint."""

    status: int = 200
    body: bytes | dict[str, Any] = b""
    delay: float = 0.0
    content_type: str = "application/json"


@dataclass
class Endpoint:
    """A real HTTP server on 127.0.0.1 that answers from a plan and records requests."""

    base_url: str
    plan: list[Reply]
    requests: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, *replies: Reply) -> None:
        """Queue the replies the next requests will get, in order."""
        self.plan.extend(replies)

    @property
    def url(self) -> str:
        """Full chat-completions URL."""
        return self.base_url + "/chat/completions"


def _completion(message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Return a chat-completions response body holding ``message``."""
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    body.update(extra)
    return body


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    """Start a threaded HTTP server that plays a queued plan of replies."""
    stop = threading.Event()
    state = Endpoint(base_url="", plan=[])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            state.requests.append(
                {"path": self.path, "headers": dict(self.headers), "body": msgspec.json.decode(raw)}
            )
            reply = state.plan.pop(0) if state.plan else Reply(status=599, body=b"no plan")
            if reply.delay and stop.wait(reply.delay):
                return
            body = reply.body if isinstance(reply.body, bytes) else msgspec.json.encode(reply.body)
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up (timeout test)

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
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _responder(endpoint: Endpoint, **options: Any) -> OpenAICompatResponder:
    return OpenAICompatResponder(endpoint.base_url, "test-model", api_key=KEY, **options)


def _fails(responder: OpenAICompatResponder) -> ResponderError:
    """Run one turn that must fail and return its error, checking no key leaked."""
    with pytest.raises(ResponderError) as caught:
        responder.respond("sys", [ChatMessage(role="user", content="hi")], model="")
    error = caught.value
    assert KEY not in str(error)
    assert error.subject == responder.url
    return error


# --- successful turns -------------------------------------------------------------------------


def test_content_reply_usage_and_reasoning_are_parsed(endpoint: Endpoint) -> None:
    """A plain answer becomes one assistant message with usage, model and reasoning."""
    endpoint.answer(
        Reply(
            body=_completion(
                {"role": "assistant", "content": "Hello!", "reasoning_content": "thought"},
                model="served-model",
                usage={"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
            )
        )
    )
    result = _responder(endpoint).respond("sys", [ChatMessage(role="user", content="hi")], model="")
    [message] = result.messages
    assert message == ChatMessage(
        role="assistant", content="Hello!", reasoning="thought", finish_reason="stop"
    )
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (12, 3)
    assert result.model == "served-model"


def test_request_body_has_system_prompt_first_and_exact_messages(endpoint: Endpoint) -> None:
    """The POST carries system prompt, then every window message in wire form, plus the key."""
    endpoint.answer(Reply(body=_completion({"role": "assistant", "content": "ok"})))
    window = [
        ChatMessage(role="user", content="/tool echo hi"),
        ChatMessage(
            role="assistant",
            tool_calls=[ToolCall(id="c1", name="echo", arguments='{"text":"hi"}')],
            reasoning="never sent back",
        ),
        ChatMessage(role="tool", content="hi", tool_call_id="c1", name="echo"),
        ChatMessage(role="user", content=[{"type": "text", "text": "and now?"}]),
    ]
    result = _responder(endpoint).respond(
        "You are Hermes.", window, model="chosen", reasoning="low"
    )
    [request] = endpoint.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    assert request["body"] == {
        "model": "chosen",
        "reasoning_effort": "low",
        "messages": [
            {"role": "system", "content": "You are Hermes."},
            {"role": "user", "content": "/tool echo hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "echo", "arguments": '{"text":"hi"}'},
                    }
                ],
            },
            {"role": "tool", "content": "hi", "tool_call_id": "c1", "name": "echo"},
            {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
        ],
    }
    assert result.model == "chosen"


def test_empty_model_argument_uses_configured_model(endpoint: Endpoint) -> None:
    """Without a per-turn model the configured one is sent; no key means no Authorization."""
    endpoint.answer(Reply(body=_completion({"role": "assistant", "content": "ok"})))
    responder = OpenAICompatResponder(endpoint.base_url + "/", "configured")
    responder.respond("", [ChatMessage(role="user", content="hi")], model="")
    [request] = endpoint.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["body"]["model"] == "configured"
    assert request["body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert "reasoning_effort" not in request["body"]
    assert "Authorization" not in request["headers"]


def test_tool_calls_are_parsed(endpoint: Endpoint) -> None:
    """A tool-call answer (content null) becomes an assistant message with ToolCalls."""
    endpoint.answer(
        Reply(
            body=_completion(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path":"x"}'},
                        },
                        {
                            "type": "function",
                            "function": {"name": "echo", "arguments": {"text": "y"}},
                        },
                    ],
                },
                usage={"prompt_tokens": 5, "completion_tokens": 7},
            )
        )
    )
    result = _responder(endpoint).respond("s", [ChatMessage(role="user", content="go")], model="")
    [message] = result.messages
    assert message.content == ""
    assert message.tool_calls == [
        ToolCall(id="call_a", name="read_file", arguments='{"path":"x"}'),
        ToolCall(id="call_1", name="echo", arguments='{"text":"y"}'),
    ]
    assert result.usage.completion_tokens == 7


def test_missing_usage_counts_zero(endpoint: Endpoint) -> None:
    """An endpoint that reports no usage yields zero tokens rather than an error."""
    endpoint.answer(Reply(body=_completion({"content": "ok", "reasoning": "r"})))
    result = _responder(endpoint).respond("s", [ChatMessage(role="user", content="x")], model="")
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (0, 0)
    assert result.messages[0].reasoning == "r"


def test_summarize_asks_the_endpoint(endpoint: Endpoint) -> None:
    """summarize sends the summary prompt and a transcript, and returns the answer text."""
    endpoint.answer(Reply(body=_completion({"content": "  They fixed the bug.  "})))
    window = [
        ChatMessage(role="user", content="Fix the bug"),
        ChatMessage(role="assistant", tool_calls=[ToolCall(id="c", name="grep")]),
        ChatMessage(role="tool", content="found", tool_call_id="c", name="grep"),
        ChatMessage(role="assistant", content="Fixed."),
    ]
    assert _responder(endpoint).summarize(window) == "They fixed the bug."
    [request] = endpoint.requests
    system, user = request["body"]["messages"]
    assert system == {"role": "system", "content": SUMMARY_PROMPT}
    assert user["content"] == (
        "user: Fix the bug\nassistant called grep({})\ntool grep result: found\nassistant: Fixed."
    )


# --- failures ---------------------------------------------------------------------------------


def test_timeout_is_a_clear_error(endpoint: Endpoint) -> None:
    """A server slower than the timeout gives 'timed out after 0.3s' naming the URL."""
    endpoint.answer(Reply(body=_completion({"content": "late"}), delay=3.0))
    error = _fails(_responder(endpoint, timeout=0.3))
    assert str(error) == f"model endpoint {endpoint.url} timed out after 0.3s"


def test_http_500_names_status_and_body_without_key(endpoint: Endpoint) -> None:
    """HTTP 500 reports the status and a body excerpt, with an echoed key scrubbed."""
    endpoint.answer(Reply(status=500, body=f"upstream exploded for key {KEY}".encode()))
    error = _fails(_responder(endpoint))
    assert str(error) == (
        f"model endpoint {endpoint.url} answered HTTP 500 Internal Server Error: "
        "upstream exploded for key ***"
    )


def test_http_error_prefers_openai_error_message(endpoint: Endpoint) -> None:
    """An OpenAI-style error body is reduced to its error.message."""
    endpoint.answer(
        Reply(status=401, body={"error": {"message": "Invalid API key", "type": "auth"}})
    )
    error = _fails(_responder(endpoint))
    assert str(error).endswith("answered HTTP 401 Unauthorized: Invalid API key")


def test_long_error_body_is_cut(endpoint: Endpoint) -> None:
    """A huge error page is cut to a short one-line excerpt."""
    endpoint.answer(Reply(status=502, body=b"<html>\n" + b"x" * 5000))
    error = _fails(_responder(endpoint))
    assert len(str(error)) < 400
    assert str(error).endswith("…")


def test_malformed_json_is_a_clear_error(endpoint: Endpoint) -> None:
    """A non-JSON body is reported as a malformed response from the URL."""
    endpoint.answer(Reply(body=b"<html>not json</html>"))
    error = _fails(_responder(endpoint))
    assert str(error).startswith(f"malformed response from {endpoint.url}: JSON is malformed")


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"choices": [{"message": {"content": 5}}]}, "at `$.choices[0].message.content`"),
        ({"choices": []}, "at `$.choices`"),
        ({"choices": [{}]}, "at `$.choices[0]`"),
        ({"object": "chat.completion"}, "at `$`"),
        ({"choices": [{"message": {"content": None}}]}, "at `$.choices[0].message`"),
    ],
)
def test_missing_or_wrong_fields_name_their_location(
    endpoint: Endpoint, body: dict[str, Any], where: str
) -> None:
    """Valid JSON with the wrong shape names the exact location that was wrong."""
    endpoint.answer(Reply(body=body))
    error = _fails(_responder(endpoint))
    assert str(error).startswith(f"malformed response from {endpoint.url}: ")
    assert str(error).endswith(where)


def test_endpoint_down_is_a_clear_error() -> None:
    """A port nothing listens on gives 'is not reachable' naming the URL."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
        responder = OpenAICompatResponder(f"http://127.0.0.1:{port}/v1", "m", api_key=KEY)
        error = _fails(responder)
    prefix = f"model endpoint http://127.0.0.1:{port}/v1/chat/completions is not reachable: "
    assert str(error).startswith(prefix)
    assert "refused" in str(error).lower()


def test_retryable_failure_is_retried(endpoint: Endpoint) -> None:
    """With max_retries=1 a 503 followed by success returns the success."""
    endpoint.answer(Reply(status=503, body=b"busy"), Reply(body=_completion({"content": "ok"})))
    responder = _responder(endpoint, max_retries=1, retry_backoff=0.0)
    result = responder.respond("", [ChatMessage(role="user", content="hi")], model="")
    assert result.messages[0].content == "ok"
    assert len(endpoint.requests) == 2


def test_client_errors_are_not_retried(endpoint: Endpoint) -> None:
    """A 400 fails at once even when retries are allowed."""
    endpoint.answer(Reply(status=400, body=b"bad"), Reply(body=_completion({"content": "ok"})))
    error = _fails(_responder(endpoint, max_retries=2, retry_backoff=0.0))
    assert "HTTP 400" in str(error)
    assert len(endpoint.requests) == 1


def test_credentials_in_base_url_are_never_shown() -> None:
    """user:password in the base URL stays out of the URL used in messages and repr."""
    responder = OpenAICompatResponder("http://me:pw@127.0.0.1:9/v1", "m", api_key=KEY)
    assert responder.url == "http://127.0.0.1:9/v1/chat/completions"
    assert "pw" not in repr(responder)
    assert KEY not in repr(responder)


def test_bad_base_url_is_a_config_error() -> None:
    """A base URL without http(s) scheme or host is refused when the responder is built."""
    with pytest.raises(ConfigError, match="http:// or https://"):
        OpenAICompatResponder("localhost:8080/v1", "m")


# --- factory ----------------------------------------------------------------------------------


def _openai_config(base_url: str, **model: Any) -> dict[str, Any]:
    return {"model": {"provider": "openai", "base_url": base_url, "name": "cfg-model", **model}}


def test_factory_defaults_to_offline() -> None:
    """No model configuration gives the offline responder."""
    assert isinstance(make_responder({}, {}), OfflineResponder)
    assert isinstance(make_responder({"model": {"name": "x"}}, {}), OfflineResponder)


def test_factory_builds_openai_responder_from_nested_config() -> None:
    """provider openai with base_url, name and timeout builds a configured responder."""
    responder = make_responder(
        _openai_config("http://127.0.0.1:1/v1", timeout=2, max_retries=1, can_see_images=True),
        {},
    )
    assert isinstance(responder, OpenAICompatResponder)
    assert responder.url == "http://127.0.0.1:1/v1/chat/completions"
    assert (responder.model, responder.timeout, responder.max_retries) == ("cfg-model", 2.0, 1)
    assert responder.can_see_images is True
    assert responder.name == "openai"


def test_factory_accepts_flat_dotted_keys() -> None:
    """Flat ``model.provider``-style keys work like the nested section."""
    config = {"model.provider": "OpenAI", "model.base_url": "https://x.test/v1", "model.name": "m"}
    responder = make_responder(config, {})
    assert isinstance(responder, OpenAICompatResponder)
    assert responder.timeout == 60.0


def test_factory_base_url_from_environment() -> None:
    """OPENAI_BASE_URL fills in a missing model.base_url."""
    config = {"model": {"provider": "openai", "name": "m"}}
    responder = make_responder(config, {"OPENAI_BASE_URL": "http://127.0.0.1:2/v1"})
    assert isinstance(responder, OpenAICompatResponder)
    assert responder.url == "http://127.0.0.1:2/v1/chat/completions"


def test_hermes_responder_offline_forces_offline() -> None:
    """HERMES_RESPONDER=offline wins over an openai configuration, even a broken one."""
    env = {"HERMES_RESPONDER": "offline"}
    assert isinstance(make_responder(_openai_config("http://x.test"), env), OfflineResponder)
    assert isinstance(make_responder({"model": {"timeout": "bad"}}, env), OfflineResponder)


@pytest.mark.parametrize(
    ("config", "env", "expected_key"),
    [
        ({"api_key": "from-config"}, {"HERMES_API_KEY": "h", "OPENAI_API_KEY": "o"}, "from-config"),
        ({}, {"HERMES_API_KEY": "h", "OPENAI_API_KEY": "o"}, "h"),
        ({}, {"OPENAI_API_KEY": "o"}, "o"),
    ],
)
def test_factory_api_key_precedence(
    endpoint: Endpoint, config: dict[str, Any], env: dict[str, str], expected_key: str
) -> None:
    """The key comes from model.api_key, else HERMES_API_KEY, else OPENAI_API_KEY."""
    endpoint.answer(Reply(body=_completion({"content": "ok"})))
    responder = make_responder(_openai_config(endpoint.base_url, **config), env)
    responder.respond("", [ChatMessage(role="user", content="hi")], model="")
    assert endpoint.requests[0]["headers"]["Authorization"] == f"Bearer {expected_key}"


@pytest.mark.parametrize(
    ("config", "env", "subject"),
    [
        ({"model": {"provider": "anthropic"}}, {}, "model.provider"),
        ({"model": {"provider": 3}}, {}, "model.provider"),
        ({"model": "gpt-4o"}, {}, "model"),
        ({}, {"HERMES_RESPONDER": "magic"}, "HERMES_RESPONDER"),
        ({"model": {"provider": "openai", "name": "m"}}, {}, "model.base_url"),
        (_openai_config("ftp://host/v1"), {}, "model.base_url"),
        (_openai_config(""), {}, "model.base_url"),
        ({"model": {"provider": "openai", "base_url": "http://h"}}, {}, "model.name"),
        (_openai_config("http://h", name=["m"]), {}, "model.name"),
        (_openai_config("http://h", timeout="30"), {}, "model.timeout"),
        (_openai_config("http://h", timeout=0), {}, "model.timeout"),
        (_openai_config("http://h", timeout=True), {}, "model.timeout"),
        (_openai_config("http://h", max_retries=-1), {}, "model.max_retries"),
        (_openai_config("http://h", max_retries=1.5), {}, "model.max_retries"),
        (_openai_config("http://h", can_see_images="yes"), {}, "model.can_see_images"),
        (_openai_config("http://h", api_key=12345), {}, "model.api_key"),
    ],
)
def test_factory_invalid_values_raise_config_error_naming_the_key(
    config: dict[str, Any], env: dict[str, str], subject: str
) -> None:
    """Each invalid setting raises ConfigError whose subject and message name the key."""
    with pytest.raises(ConfigError) as caught:
        make_responder(config, env)
    assert caught.value.subject == subject
    assert subject in str(caught.value)


def test_config_error_never_shows_a_wrong_typed_key() -> None:
    """A non-string api_key is reported by type only, never by value."""
    with pytest.raises(ConfigError) as caught:
        make_responder(_openai_config("http://h", api_key=987654321), {})
    assert "987654321" not in str(caught.value)


# --- streaming --------------------------------------------------------------------------------


def _sse(*events: dict[str, Any] | str) -> Reply:
    body = b"".join(
        b"data: " + (e.encode() if isinstance(e, str) else msgspec.json.encode(e)) + b"\n\n"
        for e in events
    )
    return Reply(body=body, content_type="text/event-stream")


def test_stream_pieces_and_tool_call_fragments_are_put_together(endpoint: Endpoint) -> None:
    """SSE deltas reach on_delta in order; tool-call fragments join by index; usage is read."""
    endpoint.answer(
        _sse(
            {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
            {"choices": [{"index": 0, "delta": {"content": "lo", "reasoning_content": "r"}}]},
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {"index": 0, "id": "c9", "function": {"name": "echo"}},
                            ]
                        },
                    }
                ]
            },
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [{"index": 0, "function": {"arguments": '{"text"'}}]
                        },
                    }
                ]
            },
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ':"y"}'}}]},
                        "finish_reason": "tool_calls",
                    }
                ]
            },
            {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}},
            "[DONE]",
        )
    )
    pieces: list[str] = []
    result = _responder(endpoint, stream=True).respond(
        "s", [ChatMessage(role="user", content="x")], model="", on_delta=pieces.append
    )
    assert endpoint.requests[0]["body"]["stream"] is True
    assert pieces == ["Hel", "lo"]
    [message] = result.messages
    assert message.content == "Hello" and message.reasoning == "r"
    assert message.tool_calls == [ToolCall(id="c9", name="echo", arguments='{"text":"y"}')]
    assert message.finish_reason == "tool_calls"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (4, 2)


def test_a_malformed_stream_event_names_the_event(endpoint: Endpoint) -> None:
    """A stream event that is not JSON is a malformed response naming the event number."""
    endpoint.answer(_sse({"choices": [{"index": 0, "delta": {"content": "a"}}]}, "{oops"))
    error = _fails(_responder(endpoint, stream=True))
    assert str(error).startswith(f"malformed response from {endpoint.url}: stream event 1: ")


def test_a_stream_cut_short_is_reported(endpoint: Endpoint) -> None:
    """A stream that ends with no finish_reason and no [DONE] is an error naming the URL."""
    endpoint.answer(_sse({"choices": [{"index": 0, "delta": {"content": "a"}}]}))
    error = _fails(_responder(endpoint, stream=True))
    assert str(error) == (
        f"model endpoint {endpoint.url} ended the stream before the answer was complete"
    )


def test_a_server_ignoring_stream_is_read_as_one_answer(endpoint: Endpoint) -> None:
    """With stream on, a plain JSON answer still works and reaches on_delta once."""
    endpoint.answer(Reply(body=_completion({"role": "assistant", "content": "whole"})))
    pieces: list[str] = []
    result = _responder(endpoint, stream=True).respond(
        "", [ChatMessage(role="user", content="x")], model="", on_delta=pieces.append
    )
    assert pieces == ["whole"] and result.messages[0].content == "whole"
