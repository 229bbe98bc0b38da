"""OpenAI chat-completions message shapes in and out, and the order a strict endpoint accepts.

In: ``normalize`` turns a message as an OpenAI-compatible client writes it into the fields a
stored message has. ``None`` stands for "not given" in any field (``content=None`` on an
assistant message that only calls tools, ``tool_calls=None``, ``uid=None``); tool calls may be
nested (``{"id", "type": "function", "function": {"name", "arguments"}}``) or flat
(``{"id", "name", "arguments"}``), their ``arguments`` a JSON string or an object (stored as its
compact JSON text); a tool message's ``name`` is the tool that answered (``tool_name``); empty
response-only fields of the SDK's message objects (``refusal``, ``annotations``, ``audio``,
``function_call``) are dropped. Content is a string or a list of content parts, kept as given.

Out: ``to_openai`` gives a stored message back in chat-completions form: nested tool calls with
their ``type``, ``content: null`` on a tool-call-only assistant message, ``name`` on tool
results, content parts as stored; reasoning is never included (providers reject it as input).
``send_order`` puts every tool result right after the assistant message that called it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from hermes_es.errors import ValidationError

if TYPE_CHECKING:
    from hermes_es.queries.transcript import TranscriptMessage

_ENCODER = msgspec.json.Encoder()

RESPONSE_ONLY_FIELDS = ("refusal", "annotations", "audio", "function_call")
"""Fields of an SDK response message that carry nothing when empty; dropped then."""


def normalize(message: Mapping[str, Any], where: str = "message") -> dict[str, Any]:
    """The stored-message fields of an OpenAI-shaped (or flat) message mapping."""
    data = {key: value for key, value in message.items() if value is not None}
    for key in RESPONSE_ONLY_FIELDS:
        if key in data and not data[key]:
            del data[key]
    if "name" in data:
        name = data.pop("name")
        if data.get("role") != "tool":
            raise ValidationError(
                f"invalid {where}: 'name' is kept only on tool messages (the tool that answered);"
                f" got it on a {data.get('role')!r} message",
                subject="name",
            )
        if data.setdefault("tool_name", name) != name:
            raise ValidationError(
                f"invalid {where}: name {name!r} and tool_name {data['tool_name']!r} differ",
                subject="name",
            )
    calls = data.get("tool_calls")
    if isinstance(calls, list):
        data["tool_calls"] = [
            _call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)
        ]
    return data


def _call(raw: Any, where: str) -> Any:
    """One tool call as stored: ``{id, name, arguments, type}`` (flat, arguments as text)."""
    if not isinstance(raw, Mapping):
        return raw  # the message validation names the wrong type
    function = raw.get("function")
    if function is not None and not isinstance(function, Mapping):
        raise ValidationError(
            f"invalid {where}: 'function' must be an object with name and arguments, got "
            f"{type(function).__name__}",
            subject="function",
        )
    fields: Mapping[str, Any] = function if function is not None else raw
    out: dict[str, Any] = {k: v for k, v in raw.items() if k != "function" and v is not None}
    for key in ("name", "arguments"):
        if fields.get(key) is not None:
            out[key] = fields[key]
    if function is not None:
        unknown = sorted(set(function) - {"name", "arguments"})
        if unknown:
            raise ValidationError(
                f"invalid {where}.function: unknown field(s) {', '.join(unknown)}",
                subject=unknown[0],
            )
    arguments = out.get("arguments")
    if arguments is not None and not isinstance(arguments, str):
        out["arguments"] = _ENCODER.encode(arguments).decode()
    if out.get("type") == "function":
        del out["type"]
    return out


def with_media_text(
    content: str | list[dict[str, Any]], media: Sequence[Mapping[str, Any]]
) -> str | list[dict[str, Any]]:
    """``content`` with the text kept for its media (descriptions, transcripts) appended."""
    blocks = [str(m["text"]) for m in media if m.get("text")]
    if not blocks:
        return content
    joined = "\n\n".join(blocks)
    if isinstance(content, str):
        return f"{content}\n\n{joined}" if content else joined
    return [*content, {"type": "text", "text": joined}]


def to_openai(message: TranscriptMessage) -> dict[str, Any]:
    """One stored message in chat-completions request form (media text rendered in)."""
    content: Any = with_media_text(
        message.parts if message.parts is not None else message.content, message.media
    )
    out: dict[str, Any] = {"role": message.role, "content": content}
    if message.tool_calls:
        if content == "":
            out["content"] = None
        out["tool_calls"] = [
            {
                "id": call.get("id", ""),
                "type": call.get("type", "function"),
                "function": {
                    "name": call.get("name", ""),
                    "arguments": call.get("arguments", "{}"),
                },
            }
            for call in message.tool_calls
        ]
    if message.role == "tool":
        if message.tool_call_id is not None:
            out["tool_call_id"] = message.tool_call_id
        if message.tool_name is not None:
            out["name"] = message.tool_name
    return out


def unanswered_calls(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(call id, tool name) of every assistant tool call in ``messages`` without a result."""
    answered = {m.get("tool_call_id") for m in messages if m["role"] == "tool"}
    return [
        (call["id"], call.get("name", ""))
        for m in messages
        if m["role"] == "assistant"
        for call in m.get("tool_calls") or []
        if call["id"] not in answered
    ]


def send_order(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The window in the order a strict endpoint accepts: each tool result right after the
    assistant message that called it (a repair result recorded later moves up to its call),
    results without their call in the window dropped."""
    pending: dict[str, Mapping[str, Any]] = {}
    calls_seen: set[str] = set()
    for m in messages:
        for call in m.get("tool_calls") or []:
            calls_seen.add(call["id"])
        if m["role"] == "tool" and m.get("tool_call_id") in calls_seen:
            pending.setdefault(m["tool_call_id"], m)
    out: list[Any] = []
    placed: set[str] = set()
    for m in messages:
        if m["role"] == "tool":
            continue
        out.append(m)
        for call in m.get("tool_calls") or []:
            result = pending.get(call["id"])
            if result is not None and call["id"] not in placed:
                placed.add(call["id"])
                out.append(result)
    return out
