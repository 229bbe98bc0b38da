"""OpenAI chat-completions message shapes: accepted as written, stored losslessly, given back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.export import ExportOptions, export_sessions
from hermes_es.commands.importing import import_backups
from hermes_es.errors import ValidationError
from hermes_es.export.backup import read_backup
from hermes_es.queries.transcript import messages_of

AGENT_LOOP: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is in notes.txt?", "name": None},
    {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "annotations": [],
        "audio": None,
        "function_call": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "list_directory", "arguments": {"path": "."}},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "name": "read_file", "content": "buy milk"},
    {
        "role": "tool",
        "tool_call_id": "call_2",
        "name": "list_directory",
        "content": [{"type": "text", "text": "notes.txt  8"}],
    },
    {"role": "assistant", "content": "It says: buy milk.", "tool_calls": None},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "and this?"},
            {"type": "image_url", "image_url": {"url": "https://example.test/a.png"}},
        ],
    },
]
"""A messages list as an OpenAI-compatible agent loop (and the openai SDK's dumps) holds it."""


def _expected() -> list[dict[str, Any]]:
    """AGENT_LOOP in the canonical form it comes back in (None fields and empty extras gone,
    object arguments as their JSON text)."""
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is in notes.txt?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": json.loads(json.dumps(AGENT_LOOP[2]["tool_calls"])),
        },
        AGENT_LOOP[3],
        AGENT_LOOP[4],
        {"role": "assistant", "content": "It says: buy milk."},
        AGENT_LOOP[6],
    ]
    out[2]["tool_calls"][1]["function"]["arguments"] = '{"path":"."}'
    return out


def test_agent_loop_list_round_trips_through_messages_openai(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """append_turn takes the list as written; messages(format='openai') gives it back."""
    sid = engine.start_session("api", cwd=str(tmp_path))
    engine.append_turn(sid, AGENT_LOOP)
    assert engine.messages(sid, format="openai") == _expected()
    rows = messages_of(engine.store.connection(), sid)
    assert rows[2].content == "" and rows[2].tool_calls[0]["name"] == "read_file"
    assert rows[3].tool_name == "read_file"


def test_flat_tool_calls_still_work_and_come_back_nested(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """The flat {id, name, arguments} call form is accepted and given back nested."""
    sid = engine.start_session("api", cwd=str(tmp_path))
    engine.append_message(sid, "user", "go", uid=None)
    engine.append_message(
        sid,
        "assistant",
        None,
        tool_calls=[{"id": "c", "name": "echo", "arguments": {"text": "x"}}],
    )
    engine.append_message(sid, "tool", "x", tool_call_id="c", tool_name="echo")
    out = engine.messages(sid)
    assert out[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c",
                "type": "function",
                "function": {"name": "echo", "arguments": '{"text":"x"}'},
            }
        ],
    }
    assert out[2] == {"role": "tool", "content": "x", "tool_call_id": "c", "name": "echo"}


def test_a_non_function_call_type_is_kept(engine: SessionEngine, tmp_path: Path) -> None:
    """A call type other than function is stored and given back as it was."""
    call = {"id": "k", "type": "custom", "function": {"name": "grammar", "arguments": "{}"}}
    sid = engine.start_session("api", cwd=str(tmp_path))
    engine.append_turn(sid, [{"role": "assistant", "content": None, "tool_calls": [call]}])
    assert engine.messages(sid)[0]["tool_calls"] == [call]


def test_results_recorded_later_are_given_back_after_their_call(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """messages() is ready to send: a result appended after other messages moves to its call."""
    sid = engine.start_session("api", cwd=str(tmp_path))
    engine.append_turn(sid, AGENT_LOOP[2:3])
    engine.append_message(sid, "user", "hello?")
    engine.append_turn(sid, AGENT_LOOP[3:5])
    roles = [m["role"] for m in engine.messages(sid)]
    assert roles == ["assistant", "tool", "tool", "user"]


def test_system_prompt_comes_first_when_asked(engine: SessionEngine, tmp_path: Path) -> None:
    """With system_prompt=True the stored prompt bytes lead the list."""
    sid = engine.start_session("api", system_prompt="You are X.\n", cwd=str(tmp_path))
    engine.append_message(sid, "user", "hi")
    assert engine.messages(sid, system_prompt=True) == [
        {"role": "system", "content": "You are X.\n"},
        {"role": "user", "content": "hi"},
    ]


@pytest.mark.parametrize(
    ("message", "needle"),
    [
        ({"role": "user", "content": "x", "name": "alice"}, "'name' is kept only on tool"),
        (
            {"role": "assistant", "tool_calls": [{"id": "c", "function": "echo"}]},
            "tool_calls[0]: 'function' must be an object",
        ),
        (
            {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "e", "x": 1}}]},
            "unknown field(s) x",
        ),
        ({"role": "tool", "content": "x", "name": "a", "tool_name": "b"}, "differ"),
    ],
)
def test_bad_shapes_are_refused_naming_the_field(
    engine: SessionEngine, tmp_path: Path, message: dict[str, Any], needle: str
) -> None:
    """A shape that cannot be stored losslessly is refused naming what was wrong; none stored."""
    sid = engine.start_session("api", cwd=str(tmp_path))
    with pytest.raises(ValidationError) as caught:
        engine.append_turn(sid, [message])
    assert needle in caught.value.message
    assert engine.messages(sid) == []


def test_edit_and_compact_accept_openai_shapes(engine: SessionEngine, tmp_path: Path) -> None:
    """edit_message and compact take OpenAI-shaped messages too."""
    sid = engine.start_session("api", cwd=str(tmp_path))
    seqs = engine.append_turn(sid, AGENT_LOOP[:2])
    engine.edit_message(sid, seqs[1], [{"type": "text", "text": "edited"}], uid=None, name=None)
    engine.compact(sid, [seqs[0]], [{"role": "system", "content": "summary", "tool_calls": None}])
    out = engine.messages(sid)
    assert out == [
        {"role": "system", "content": "summary"},
        {"role": "user", "content": [{"type": "text", "text": "edited"}]},
    ]


def test_backup_import_backup_is_byte_identical_and_accepts_openai_lines(tmp_path: Path) -> None:
    """backup → import → backup gives the same bytes; an OpenAI-shaped backup line imports."""
    opts = ExportOptions(fmt="jsonl", at=5.0)
    with SessionEngine.open(tmp_path / "a.db") as engine:
        sid = engine.start_session("api", cwd=str(tmp_path))
        engine.append_turn(
            sid, [*AGENT_LOOP, {"role": "assistant", "content": "r", "reasoning_content": "why"}]
        )
        [first] = export_sessions(engine.store.connection(), tmp_path / "out1", [sid], opts)
    with SessionEngine.open(tmp_path / "b.db") as engine:
        import_backups(engine.store, [tmp_path / "out1" / first.file])
        [again] = export_sessions(engine.store.connection(), tmp_path / "out2", [sid], opts)
        restored = read_backup(engine.store.connection(), sid)
    one = (tmp_path / "out1" / first.file).read_bytes()
    assert (tmp_path / "out2" / again.file).read_bytes() == one
    assert restored.messages[-1].reasoning_content == "why"
    assert restored.messages[2].tool_calls[1].arguments == '{"path":"."}'

    line = {
        "format": "hermes-es.session/1",
        "id": "openai-shaped",
        "source": "api",
        "messages": [{**m, "at": 1.0} for m in AGENT_LOOP],
    }
    path = tmp_path / "openai.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with SessionEngine.open(tmp_path / "c.db") as engine:
        import_backups(engine.store, [path])
        rows = messages_of(engine.store.connection(), "openai-shaped")
    assert [r.role for r in rows] == [m["role"] for m in AGENT_LOOP]
    assert rows[2].tool_calls[0] == {
        "id": "call_1",
        "name": "read_file",
        "arguments": '{"path": "notes.txt"}',
    }
    assert rows[3].tool_name == "read_file"
