"""Runs inside the hermes-agent==0.19.0 virtual environment: writes a state.db with Hermes' own
``SessionDB`` and prints what Hermes itself reads back (one JSON object on stdout).

``python hermes_agent_side.py build DB`` creates two sessions (a gateway chat with a tool turn,
reasoning, token counts and usage, titled and ended; and a CLI session); ``grow DB`` appends two
messages to the gateway chat and more usage. Only the standard library and Hermes are imported.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

PROMPT = "You are Hermes.\n\n  Keep these bytes exactly: tabs\tand ünïcode ✓ \n"
CHAT = "20260101_120000_abcdef"
CLI = "20260102_090000_123456"


def _db(path: Path) -> Any:
    os.environ["HERMES_HOME"] = str(path.parent)
    from hermes_state import SessionDB

    return SessionDB(db_path=path)


def build(path: Path) -> dict[str, Any]:
    db = _db(path)
    db.create_session(
        CHAT,
        "telegram",
        model="gpt-test",
        model_config={"temperature": 0.2},
        system_prompt=PROMPT,
        user_id="tg:42",
        session_key="agent:main:telegram:dm:42",
        chat_id="42",
        chat_type="dm",
        thread_id="7",
        cwd=str(path.parent),
    )
    db.append_message(CHAT, "user", content="what is in the log?", timestamp=1767268800.0)
    db.append_message(
        CHAT,
        "assistant",
        content="",
        tool_calls=[
            {
                "id": "call_a1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "app.log"}'},
            }
        ],
        finish_reason="tool_calls",
        reasoning="look at the log first",
        reasoning_content="provider reasoning text",
        token_count=17,
        timestamp=1767268801.5,
    )
    db.append_message(
        CHAT,
        "tool",
        content="ERROR disk full",
        tool_call_id="call_a1",
        tool_name="read_file",
        token_count=4,
        timestamp=1767268802.0,
    )
    db.append_message(
        CHAT,
        "assistant",
        content="The disk is full.",
        finish_reason="stop",
        token_count=6,
        timestamp=1767268803.0,
    )
    db.update_token_counts(
        CHAT,
        input_tokens=1200,
        output_tokens=300,
        model="gpt-test",
        cache_read_tokens=800,
        cache_write_tokens=100,
        reasoning_tokens=50,
        estimated_cost_usd=0.0125,
        api_call_count=2,
    )
    db.set_session_title(CHAT, "Disk full")
    db.end_session(CHAT, "user_exit")
    db.create_session(CLI, "cli", model="gpt-test", system_prompt="CLI prompt", cwd="/tmp")
    db.append_message(CLI, "user", content="hi", timestamp=1767344400.0)
    db.append_message(CLI, "assistant", content="hello", timestamp=1767344401.0)
    return _readback(db, path)


def grow(path: Path) -> dict[str, Any]:
    db = _db(path)
    db.append_message(CHAT, "user", content="and now?", timestamp=1767272400.0)
    db.append_message(
        CHAT, "assistant", content="Freed 2 GB.", token_count=5, timestamp=1767272401.0
    )
    db.update_token_counts(CHAT, input_tokens=100, output_tokens=20, api_call_count=1)
    return _readback(db, path)


def _readback(db: Any, path: Path) -> dict[str, Any]:
    out = {sid: db.get_messages_as_conversation(sid) for sid in (CHAT, CLI)}
    db.close()
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    sessions = {r["id"]: dict(r) for r in conn.execute("SELECT * FROM sessions")}
    messages = [dict(r) for r in conn.execute("SELECT * FROM messages ORDER BY id")]
    conn.close()
    return {"conversations": out, "sessions": sessions, "messages": messages}


if __name__ == "__main__":
    action, target = sys.argv[1], Path(sys.argv[2])
    print(json.dumps({"build": build, "grow": grow}[action](target)))
