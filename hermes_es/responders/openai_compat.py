"""A responder for any OpenAI-compatible ``/chat/completions`` endpoint (stdlib HTTP only)."""

from __future__ import annotations

import http.client
import time
from typing import Annotated, Any
from urllib.parse import SplitResult, urlsplit

import msgspec

from hermes_es.errors import ConfigError, ResponderError
from hermes_es.responders.base import ChatMessage, ToolCall, TurnResult, Usage, text_of

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


_RESPONSE_DECODER = msgspec.json.Decoder(_WireResponse)
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
        timeout: float = 30.0,
        max_retries: int = 0,
        *,
        can_see_images: bool = False,
        retry_backoff: float = 0.5,
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
        # Public form of the endpoint URL (no credentials, no query), used in every error.
        self.url = _without_credentials(parts._replace(path=self._path, query="", fragment=""))
        self.model = model
        self._api_key = api_key or None
        self.timeout = timeout
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self._can_see_images = can_see_images

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
    ) -> TurnResult:
        """Send system prompt + window to the endpoint and return the assistant message."""
        chosen = model or self.model
        wire_messages = request_messages(system_prompt, messages)
        body: dict[str, Any] = {"model": chosen, "messages": wire_messages}
        if reasoning is not None:
            body["reasoning_effort"] = reasoning
        response = self._post(body)
        wire = response.choices[0].message
        if not wire.content and not wire.tool_calls:
            raise ResponderError(
                f"malformed response from {self.url}: neither content nor tool_calls"
                " - at `$.choices[0].message`",
                subject=self.url,
            )
        return _turn_result(response, chosen)

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

    def _post(self, body: dict[str, Any]) -> _WireResponse:
        """POST ``body``, retrying retryable failures up to ``max_retries`` times."""
        payload = _ENCODER.encode(body)
        attempt = 0
        while True:
            try:
                return self._post_once(payload)
            except _Attempt as failed:
                if not failed.retryable or attempt >= self.max_retries:
                    raise failed.error from failed.__cause__
            time.sleep(self.retry_backoff * (2**attempt))
            attempt += 1

    def _post_once(self, payload: bytes) -> _WireResponse:
        """Make one HTTP exchange and decode its answer; failures raise ``_Attempt``."""
        connection = self._connection()
        try:
            connection.request("POST", self._path, body=payload, headers=self._headers())
            response = connection.getresponse()
            status, reason, raw = response.status, response.reason, response.read()
        except TimeoutError as exc:
            raise self._fail(f"timed out after {self.timeout:g}s", retryable=True) from exc
        except OSError as exc:
            raise self._fail(f"is not reachable: {exc}", retryable=True) from exc
        except http.client.HTTPException as exc:
            detail = f"broke off the HTTP exchange: {type(exc).__name__}: {exc}"
            raise self._fail(detail, retryable=True) from exc
        finally:
            connection.close()
        if not 200 <= status < 300:
            detail = f"answered HTTP {status} {reason}: {self._excerpt(raw)}"
            raise self._fail(detail, retryable=status in _RETRYABLE_STATUS)
        try:
            return _RESPONSE_DECODER.decode(raw)
        except msgspec.MsgspecError as exc:
            message = self._scrub(f"malformed response from {self.url}: {_located(exc)}")
            raise _Attempt(ResponderError(message, subject=self.url), retryable=False) from exc

    def _connection(self) -> http.client.HTTPConnection:
        """Open a connection object (not yet connected) to the endpoint host."""
        host = self._parts.hostname or ""
        port = self._parts.port
        if self._parts.scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=self.timeout)
        return http.client.HTTPConnection(host, port, timeout=self.timeout)

    def _headers(self) -> dict[str, str]:
        """Return request headers, with the bearer token when a key is configured."""
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "hermes-es",
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _fail(self, detail: str, *, retryable: bool) -> _Attempt:
        """Build a failed attempt whose error names the endpoint and never the key."""
        message = self._scrub(f"model endpoint {self.url} {detail}")
        return _Attempt(ResponderError(message, subject=self.url), retryable=retryable)

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
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
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
