"""A responder for any OpenAI-compatible ``/chat/completions`` endpoint, over httpx.

One ``respond`` is one model call. With ``stream`` the request asks for server-sent events
(parsed by httpx-sse) and each piece of reply text goes to ``on_delta`` as it arrives; tool-call
fragments are put back together by their ``index``. A server that ignores ``stream`` and answers
with one JSON body is read as such. A set ``cancel`` event stops reading between events and
returns what arrived (``interrupted``). Every failure is a ``ResponderError`` naming the
endpoint URL (never the key): unreachable, timed out, an HTTP status with an excerpt of the
body, or a malformed answer naming the location that was wrong. Retryable failures (network,
timeouts, 408/409/429/5xx) are retried ``max_retries`` times, but never once reply text has
been handed to ``on_delta``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Annotated, Any
from urllib.parse import SplitResult, urlsplit

import httpx
import msgspec

from hermes_es.errors import ConfigError, ResponderError
from hermes_es.responders.base import (
    ChatMessage,
    OnDelta,
    ToolCall,
    TurnResult,
    Usage,
    text_of,
)

SUMMARY_PROMPT = (
    "You compact conversations. Summarize the transcript the user sends so the conversation "
    "can continue from the summary alone: goals, decisions, facts, file paths, commands, open "
    "questions. Be concise. Reply with the summary only."
)
"""System prompt used when asking the endpoint for a compaction summary."""

_EXCERPT_CHARS = 200
_TOOL_RESULT_CHARS = 2000
_RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class _WireFunction(msgspec.Struct):
    """``function`` of a tool call in a response."""

    name: str
    arguments: str | dict[str, Any] = "{}"


class _WireToolCall(msgspec.Struct):
    """One tool call in a response message."""

    function: _WireFunction
    id: str = ""
    type: str = "function"


class _WireMessage(msgspec.Struct):
    """``choices[i].message`` of a response."""

    content: str | None = None
    tool_calls: list[_WireToolCall] | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None


class _WireChoice(msgspec.Struct):
    """One choice of a response."""

    message: _WireMessage
    finish_reason: str | None = None


class _WireUsage(msgspec.Struct):
    """``usage`` of a response."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


class _WireResponse(msgspec.Struct):
    """The parts of a chat-completions response this responder reads."""

    choices: Annotated[list[_WireChoice], msgspec.Meta(min_length=1)]
    usage: _WireUsage | None = None
    model: str | None = None


class _DeltaFunction(msgspec.Struct):
    """``function`` fragment of a streamed tool call."""

    name: str | None = None
    arguments: str | None = None


class _DeltaToolCall(msgspec.Struct):
    """A fragment of one streamed tool call, placed by ``index``."""

    index: int = 0
    id: str | None = None
    type: str | None = None
    function: _DeltaFunction | None = None


class _Delta(msgspec.Struct):
    """``choices[i].delta`` of a stream chunk."""

    content: str | None = None
    tool_calls: list[_DeltaToolCall] | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None


class _ChunkChoice(msgspec.Struct):
    """One choice of a stream chunk."""

    delta: _Delta = msgspec.field(default_factory=_Delta)
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    """One ``data:`` event of a streamed answer."""

    choices: list[_ChunkChoice] = []
    usage: _WireUsage | None = None
    model: str | None = None


_RESPONSE_DECODER = msgspec.json.Decoder(_WireResponse)
_CHUNK_DECODER = msgspec.json.Decoder(_Chunk)
_ENCODER = msgspec.json.Encoder()


class _Attempt(Exception):
    """A failed attempt; ``retryable`` says whether another try may help."""

    def __init__(self, error: ResponderError, *, retryable: bool) -> None:
        super().__init__(error.message)
        self.error = error
        self.retryable = retryable


class OpenAICompatResponder:
    """Responder that POSTs the conversation window to ``{base_url}/chat/completions``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 0,
        *,
        can_see_images: bool = False,
        retry_backoff: float = 0.5,
        stream: bool = False,
    ) -> None:
        """Configure the endpoint; ``timeout`` bounds connecting and each read, in seconds."""
        parts = urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"model endpoint base URL must be an http:// or https:// URL with a host, "
                f"got {_without_credentials(parts)!r}",
                subject="model.base_url",
            )
        self._parts = parts
        self._path = parts.path.rstrip("/") + "/chat/completions"
        # The URL requested (credentials included, as the user configured them) ...
        self._target = parts._replace(path=self._path, fragment="").geturl()
        # ... and its public form (no credentials, no query), used in every error.
        self.url = _without_credentials(parts._replace(path=self._path, query="", fragment=""))
        self.model = model
        self._api_key = api_key or None
        self.timeout = timeout
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self.stream = stream
        self._can_see_images = can_see_images
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    def _http(self) -> httpx.Client:
        """The responder's one HTTP client (made on first use: building one costs ~30 ms of
        TLS setup), shared by every request so connections are kept alive between calls."""
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout, trust_env=False)
            return self._client

    def close(self) -> None:
        """Close the HTTP client and its pooled connections."""
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __del__(self) -> None:
        """Close pooled connections when the responder goes away unclosed."""
        client = getattr(self, "_client", None)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    @property
    def name(self) -> str:
        """Responder kind: ``openai``."""
        return "openai"

    @property
    def can_see_images(self) -> bool:
        """Whether the configured model accepts image content parts."""
        return self._can_see_images

    def __repr__(self) -> str:
        """Describe the responder without its API key."""
        return f"OpenAICompatResponder(url={self.url!r}, model={self.model!r})"

    def respond(
        self,
        system_prompt: str,
        messages: list[ChatMessage],
        *,
        model: str,
        reasoning: str | None = None,
        tools: Sequence[dict[str, Any]] = (),
        on_delta: OnDelta | None = None,
        cancel: threading.Event | None = None,
    ) -> TurnResult:
        """Send system prompt + window (+ tools) to the endpoint; return the assistant message."""
        chosen = model or self.model
        body: dict[str, Any] = {
            "model": chosen,
            "messages": request_messages(system_prompt, messages),
        }
        if reasoning is not None:
            body["reasoning_effort"] = reasoning
        if tools:
            body["tools"] = list(tools)
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return self._post(body, chosen, on_delta, cancel)

    def summarize(self, messages: list[ChatMessage]) -> str:
        """Ask the endpoint for a compaction summary of ``messages``."""
        transcript = render_transcript(messages)
        result = self.respond(
            SUMMARY_PROMPT,
            [ChatMessage(role="user", content=transcript)],
            model=self.model,
        )
        summary = text_of(result.messages[-1].content).strip()
        if not summary:
            raise ResponderError(
                f"model endpoint {self.url} returned an empty summary", subject=self.url
            )
        return summary

    def _post(
        self,
        body: dict[str, Any],
        chosen: str,
        on_delta: OnDelta | None,
        cancel: threading.Event | None,
    ) -> TurnResult:
        """POST ``body``, retrying retryable failures up to ``max_retries`` times."""
        payload = _ENCODER.encode(body)
        attempt = 0
        while True:
            sink = _Sink(on_delta)
            try:
                return self._post_once(payload, chosen, sink, cancel)
            except _Attempt as failed:
                if not failed.retryable or attempt >= self.max_retries or sink.used:
                    raise failed.error from failed.__cause__
            time.sleep(self.retry_backoff * (2**attempt))
            attempt += 1

    def _post_once(
        self, payload: bytes, chosen: str, sink: _Sink, cancel: threading.Event | None
    ) -> TurnResult:
        """Make one HTTP exchange and decode its answer; failures raise ``_Attempt``."""
        try:
            with self._http().stream(
                "POST", self._target, content=payload, headers=self._headers()
            ) as response:
                if not 200 <= response.status_code < 300:
                    raw = response.read()
                    detail = (
                        f"answered HTTP {response.status_code} {response.reason_phrase}: "
                        f"{self._excerpt(raw)}"
                    )
                    raise self._fail(detail, retryable=response.status_code in _RETRYABLE_STATUS)
                kind = response.headers.get("content-type", "")
                if "text/event-stream" in kind:
                    return self._read_stream(response, chosen, sink, cancel)
                raw = response.read()
        except httpx.TimeoutException as exc:
            raise self._fail(f"timed out after {self.timeout:g}s", retryable=True) from exc
        except httpx.ConnectError as exc:
            raise self._fail(f"is not reachable: {_reason(exc)}", retryable=True) from exc
        except (httpx.TransportError, httpx.StreamError) as exc:
            detail = f"broke off the HTTP exchange: {type(exc).__name__}: {_reason(exc)}"
            raise self._fail(detail, retryable=True) from exc
        try:
            decoded = _RESPONSE_DECODER.decode(raw)
        except msgspec.MsgspecError as exc:
            raise self._malformed(_located(exc)) from exc
        wire = decoded.choices[0].message
        if not wire.content and not wire.tool_calls:
            raise self._malformed("neither content nor tool_calls - at `$.choices[0].message`")
        result = _turn_result(decoded, chosen)
        sink.send(text_of(result.messages[0].content))
        return result

    def _read_stream(
        self,
        response: httpx.Response,
        chosen: str,
        sink: _Sink,
        cancel: threading.Event | None,
    ) -> TurnResult:
        """Read a server-sent-event answer, handing text to the sink as it arrives."""
        from httpx_sse import EventSource

        assembly = _Assembly()
        events = EventSource(response).iter_sse()
        with _wake_on_cancel(response, cancel):
            try:
                return self._read_events(events, assembly, chosen, sink, cancel)
            except (httpx.TransportError, httpx.StreamError):
                if cancel is None or not cancel.is_set():
                    raise
        return assembly.result(chosen, interrupted=True)  # cancelled while a read was blocked

    def _read_events(
        self,
        events: Iterator[Any],
        assembly: _Assembly,
        chosen: str,
        sink: _Sink,
        cancel: threading.Event | None,
    ) -> TurnResult:
        """Assemble the answer from its events (stopping once ``cancel`` is set)."""
        number = 0
        for event in _until_cancelled(events, cancel):
            data = event.data.strip()
            if data == "[DONE]":
                break
            if not data:
                continue
            try:
                chunk = _CHUNK_DECODER.decode(data)
            except msgspec.MsgspecError as exc:
                raise self._malformed(f"stream event {number}: {_located(exc)}") from exc
            number += 1
            try:
                assembly.add(chunk, sink)
            except ValueError as exc:
                raise self._malformed(f"stream event {number - 1}: {exc}") from exc
        else:
            if not (cancel is not None and cancel.is_set()) and assembly.finish_reason is None:
                raise self._fail("ended the stream before the answer was complete", retryable=True)
        interrupted = cancel is not None and cancel.is_set() and assembly.finish_reason is None
        if not interrupted and not assembly.text and not assembly.calls:
            raise self._malformed("the stream carried neither content nor tool_calls")
        return assembly.result(chosen, interrupted=interrupted)

    def _headers(self) -> dict[str, str]:
        """Return request headers, with the bearer token when a key is configured."""
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream, application/json" if self.stream else "application/json",
            "User-Agent": "hermes-es",
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _fail(self, detail: str, *, retryable: bool) -> _Attempt:
        """Build a failed attempt whose error names the endpoint and never the key."""
        message = self._scrub(f"model endpoint {self.url} {detail}")
        return _Attempt(ResponderError(message, subject=self.url), retryable=retryable)

    def _malformed(self, detail: str) -> _Attempt:
        """A malformed answer (never retried)."""
        message = self._scrub(f"malformed response from {self.url}: {detail}")
        return _Attempt(ResponderError(message, subject=self.url), retryable=False)

    def _excerpt(self, raw: bytes) -> str:
        """Return a short one-line excerpt of an error body, preferring ``error.message``."""
        text = raw.decode("utf-8", errors="replace")
        try:
            decoded = msgspec.json.decode(raw)
        except msgspec.MsgspecError:
            decoded = None
        if isinstance(decoded, dict):
            error = decoded.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                text = error["message"]
            elif isinstance(error, str):
                text = error
        flat = " ".join(text.split()) or "(empty body)"
        return flat if len(flat) <= _EXCERPT_CHARS else flat[: _EXCERPT_CHARS - 1] + "…"

    def _scrub(self, message: str) -> str:
        """Remove the API key from ``message`` wherever an endpoint echoed it."""
        if self._api_key:
            message = message.replace(self._api_key, "***")
        return message


class _Sink:
    """Hands reply text to ``on_delta`` and remembers whether any was handed over."""

    def __init__(self, on_delta: OnDelta | None) -> None:
        self._on_delta = on_delta
        self.used = False

    def send(self, text: str) -> None:
        if text and self._on_delta is not None:
            self.used = True
            self._on_delta(text)


class _Assembly:
    """A streamed answer put back together: text, reasoning, tool calls by index, usage."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.finish_reason: str | None = None
        self.usage = _WireUsage()
        self.model: str | None = None

    def add(self, chunk: _Chunk, sink: _Sink) -> None:
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.model:
            self.model = chunk.model
        for choice in chunk.choices[:1]:
            delta = choice.delta
            if delta.content:
                self.text.append(delta.content)
                sink.send(delta.content)
            thought = delta.reasoning if delta.reasoning is not None else delta.reasoning_content
            if thought:
                self.reasoning.append(thought)
            for part in delta.tool_calls or []:
                if part.index < 0:
                    raise ValueError(f"tool call index {part.index} is negative")
                call = self.calls.setdefault(
                    part.index, {"id": "", "type": "function", "name": "", "arguments": ""}
                )
                if part.id:
                    call["id"] = part.id
                if part.type:
                    call["type"] = part.type
                if part.function is not None:
                    call["name"] += part.function.name or ""
                    call["arguments"] += part.function.arguments or ""
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason

    def result(self, chosen: str, *, interrupted: bool) -> TurnResult:
        calls = [
            ToolCall(
                id=call["id"] or f"call_{index}",
                name=call["name"],
                arguments=call["arguments"] or "{}",
                type=call["type"],
            )
            for index, call in sorted(self.calls.items())
            if call["name"]
        ]
        message = ChatMessage(
            role="assistant",
            content="".join(self.text),
            tool_calls=[] if interrupted else calls,
            reasoning="".join(self.reasoning) or None,
            finish_reason="interrupted" if interrupted else self.finish_reason,
        )
        return TurnResult(
            messages=[message],
            usage=Usage(
                prompt_tokens=self.usage.prompt_tokens,
                completion_tokens=self.usage.completion_tokens,
            ),
            model=self.model or chosen,
            interrupted=interrupted,
        )


@contextlib.contextmanager
def _wake_on_cancel(response: httpx.Response, cancel: threading.Event | None) -> Iterator[None]:
    """While the block runs, a set ``cancel`` shuts the connection's socket down, so a read
    blocked on a stalled stream returns at once (closing alone does not wake it)."""
    if cancel is None:
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if cancel.wait(0.05):
                stream = response.extensions.get("network_stream")
                sock = stream.get_extra_info("socket") if stream is not None else None
                if sock is not None and not done.is_set():
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                return

    watcher = threading.Thread(target=watch, name="hermes-stream-cancel", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def _until_cancelled(events: Iterator[Any], cancel: threading.Event | None) -> Iterator[Any]:
    """The events, stopping (before the next one) once ``cancel`` is set."""
    for event in events:
        if cancel is not None and cancel.is_set():
            return
        yield event


def _reason(exc: Exception) -> str:
    """The innermost OS-level reason of a transport error (``[Errno 111] Connection refused``)."""
    inner: BaseException | None = exc
    while inner is not None:
        if isinstance(inner, OSError):
            return str(inner)
        inner = inner.__cause__ or inner.__context__
    return str(exc) or type(exc).__name__


def request_messages(system_prompt: str, messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Return the wire ``messages``: the system prompt first, then each message as sent."""
    wire: list[dict[str, Any]] = []
    if system_prompt:
        wire.append({"role": "system", "content": system_prompt})
    wire.extend(_wire_message(message) for message in messages)
    return wire


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    """Return one message in chat-completions form (reasoning is never sent back)."""
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        if message.content == "":
            wire["content"] = None  # what chat-completions itself sends for a tool-call turn
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": call.type,
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        wire["name"] = message.name
    return wire


def render_transcript(messages: list[ChatMessage]) -> str:
    """Render messages as plain ``role: text`` lines for a summary request."""
    lines: list[str] = []
    for message in messages:
        text = text_of(message.content)
        if message.role == "tool":
            if len(text) > _TOOL_RESULT_CHARS:
                text = text[:_TOOL_RESULT_CHARS] + " …(truncated)"
            lines.append(f"tool {message.name or ''} result: {text}")
            continue
        if text:
            lines.append(f"{message.role}: {text}")
        lines.extend(
            f"{message.role} called {call.name}({call.arguments})" for call in message.tool_calls
        )
    return "\n".join(lines)


def _turn_result(response: _WireResponse, requested_model: str) -> TurnResult:
    """Convert a decoded response into a ``TurnResult`` holding one assistant message."""
    choice = response.choices[0]
    wire = choice.message
    calls = [
        ToolCall(
            id=call.id or f"call_{index}",
            name=call.function.name,
            arguments=(
                call.function.arguments
                if isinstance(call.function.arguments, str)
                else _ENCODER.encode(call.function.arguments).decode()
            ),
            type=call.type,
        )
        for index, call in enumerate(wire.tool_calls or [])
    ]
    message = ChatMessage(
        role="assistant",
        content=wire.content or "",
        tool_calls=calls,
        reasoning=wire.reasoning if wire.reasoning is not None else wire.reasoning_content,
        finish_reason=choice.finish_reason,
    )
    usage = response.usage or _WireUsage()
    return TurnResult(
        messages=[message],
        usage=Usage(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens),
        model=response.model or requested_model,
    )


def _located(exc: msgspec.MsgspecError) -> str:
    """Return msgspec's error text, always naming a location (``$`` for the top level)."""
    text = str(exc)
    if isinstance(exc, msgspec.ValidationError) and " - at `$" not in text:
        text += " - at `$`"
    return text


def _without_credentials(parts: SplitResult) -> str:
    """Return the URL without any ``user:password@`` part."""
    netloc = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=netloc).geturl()
