"""Builders shared by the export, import and verified-delete tests."""

from __future__ import annotations

import itertools
from pathlib import Path

from hermes_es.commands.engine import SessionEngine


def clock(start: float = 1_700_000_000.0) -> object:
    """A deterministic clock advancing one second per call."""
    counter = itertools.count()
    return lambda: start + next(counter)


_OPENED: list[SessionEngine] = []
"""Engines opened by ``open_engine`` and not yet passed to ``close_opened_engines``."""


def open_engine(home: Path) -> SessionEngine:
    """An engine on ``home/state.db`` with a deterministic clock (closed by the test's teardown)."""
    home.mkdir(parents=True, exist_ok=True)
    engine = SessionEngine.open(home, clock=clock(), actor="test")  # type: ignore[arg-type]
    _OPENED.append(engine)
    return engine


def close_opened_engines() -> None:
    """Close every engine ``open_engine`` returned (closing one twice is harmless)."""
    while _OPENED:
        _OPENED.pop().close()


def rich_session(engine: SessionEngine, marker: str = "MARKER") -> str:
    """A session exercising every stored-row state, flags, a prompt, usage and lineage."""
    sid = engine.start_session(
        "cli",
        session_id="20240101_000000_aaaaaa",
        title="Rich one",
        model="m1",
        model_config={"reasoning_effort": "high"},
        system_prompt="You are helpful.",
        tools=["read", "write"],
        cwd="/tmp/project",
    )
    engine.append_message(sid, "user", f"hello {marker} first")
    engine.append_turn(
        sid,
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "name": "read", "arguments": '{"p": 1}'}],
            },
            {"role": "tool", "content": "file body", "tool_call_id": "c1", "tool_name": "read"},
            {"role": "assistant", "content": "done reading", "tokens_in": 7, "tokens_out": 3},
        ],
    )
    engine.append_message(sid, "user", "second question")
    engine.append_message(sid, "assistant", "second answer")
    engine.rewind(sid, 4)
    engine.append_message(sid, "assistant", "better second answer")
    engine.edit_message(sid, 0, f"hello {marker} edited")
    engine.compact(sid, [1, 2, 3], [{"role": "assistant", "content": "summary of tools"}])
    engine.append_message(sid, "user", [{"type": "text", "text": "structured part"}])
    engine.record_usage(sid, 11, 5)
    engine.set_reasoning(sid, "low")
    engine.pin(sid)
    engine.archive(sid, "sweep")
    engine.hide(sid)
    engine.end_session(sid, "user_exit")
    return sid


def delegate(engine: SessionEngine, parent: str, n: int, marker: str = "MARKER") -> str:
    """A delegate (subagent) child of ``parent`` with two messages."""
    cid = engine.start_session(
        "subagent", session_id=f"{parent}_d{n}", parent_id=parent, parent_kind="delegate", cwd="/"
    )
    engine.append_message(cid, "user", f"delegate task {n} {marker}")
    engine.append_message(cid, "assistant", f"delegate answer {n}")
    return cid


def plain_session(engine: SessionEngine, sid: str, n: int, *, source: str = "cli") -> str:
    """A session with ``n`` alternating user/assistant messages."""
    engine.start_session(source, session_id=sid, cwd="/")
    for i in range(n):
        engine.append_message(sid, "user" if i % 2 == 0 else "assistant", f"{sid} message {i}")
    return sid
