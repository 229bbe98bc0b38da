"""Migration of a state.db written by the real Hermes Agent (``hermes-agent==0.19.0`` from PyPI).

The package is installed once into ``.venv-hermes-agent/`` at the repository root (gitignored)
and reused by later runs; the tests are skipped, with the reason, only when it cannot be
installed (no network and no cached environment).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hermes_es import events as ev
from hermes_es.commands.chat import Chat
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.migrate_hermes import import_hermes_db
from hermes_es.config import HermesConfig
from hermes_es.queries.transcript import messages_of
from hermes_es.responders.openai_compat import OpenAICompatResponder

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.openai_server import fake_model
except ModuleNotFoundError:  # pragma: no cover
    from openai_server import fake_model  # type: ignore[no-redef,import-not-found]

HERMES_VERSION = "0.19.0"
ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-hermes-agent"
SIDE = Path(__file__).with_name("hermes_agent_side.py")
CHAT = "20260101_120000_abcdef"
CLI = "20260102_090000_123456"


def _installed(python: Path) -> bool:
    probe = "import importlib.metadata as m, hermes_state; print(m.version('hermes-agent'))"
    if not python.exists():
        return False
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=120)
    return done.returncode == 0 and done.stdout.strip() == HERMES_VERSION


@pytest.fixture(scope="module")
def hermes_python() -> Path:
    """The interpreter of a virtual environment holding hermes-agent (installed on first use)."""
    python = VENV / "bin" / "python"
    if _installed(python):
        return python
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", f"hermes-agent=={HERMES_VERSION}"],
            capture_output=True,
            text=True,
            timeout=1200,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot install hermes-agent=={HERMES_VERSION}: {exc}")
    if done.returncode != 0 or not _installed(python):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        pytest.skip(f"cannot install hermes-agent=={HERMES_VERSION}: {' / '.join(tail)}")
    return python


def _hermes(python: Path, action: str, db: Path) -> dict[str, Any]:
    """Run Hermes' own SessionDB on ``db``; returns what Hermes reads back."""
    done = subprocess.run(
        [str(python), str(SIDE), action, str(db)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=db.parent,
        env={"PATH": "/usr/bin:/bin", "HOME": str(db.parent), "HERMES_HOME": str(db.parent)},
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def source(
    hermes_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any]]:
    """A Hermes state.db written by hermes-agent itself, and Hermes' own reading of it."""
    db = tmp_path_factory.mktemp("hermes-home") / "state.db"
    return db, _hermes(hermes_python, "build", db)


def _usage(engine: SessionEngine, sid: str) -> list[ev.TokenUsageRecorded]:
    rows = engine.store.connection().execute(
        "SELECT topic, state FROM events WHERE originator_id = ? AND topic = ?"
        " ORDER BY originator_version",
        (sid, ev.TokenUsageRecorded.topic),
    )
    return [e for t, d in rows if isinstance(e := ev.decode(t, d), ev.TokenUsageRecorded)]


def _ended_at(engine: SessionEngine, sid: str) -> float:
    rows = engine.store.connection().execute(
        "SELECT topic, state FROM events WHERE originator_id = ? AND topic = ?",
        (sid, ev.SessionEnded.topic),
    )
    [(topic, data)] = list(rows)
    return ev.decode(topic, data).at


def test_every_field_arrives(source: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """Session and message fields of a real Hermes store arrive field by field."""
    db, hermes = source
    with SessionEngine.open(tmp_path / "state.db") as engine:
        report = import_hermes_db(engine.store, db)
        assert report.imported_sessions == 2 and report.over_cap == []
        src = hermes["sessions"][CHAT]
        state = engine.get(CHAT)
        assert (state.source, state.user_id, state.model, state.title) == (
            "telegram", "tg:42", "gpt-test", "Disk full",
        )  # fmt: skip
        assert engine.stored_prompt(CHAT) == src["system_prompt"]
        started = (
            engine.store.connection()
            .execute(
                "SELECT state FROM events WHERE originator_id = ? AND originator_version = 1",
                (CHAT,),
            )
            .fetchall()[0][0]
        )
        first = ev.decode(ev.SessionStarted.topic, started)
        assert isinstance(first, ev.SessionStarted)
        assert first.at == src["started_at"] and first.chat_id == "42"
        assert first.model_config == {"temperature": 0.2}
        routing = first.launch_flags["hermes"]
        assert (routing["session_key"], routing["chat_type"], routing["thread_id"]) == (
            "agent:main:telegram:dm:42", "dm", "7",
        )  # fmt: skip
        assert state.ended and _ended_at(engine, CHAT) == src["ended_at"]
        [usage] = _usage(engine, CHAT)
        assert (
            usage.tokens_in, usage.tokens_out, usage.cache_read_tokens, usage.cache_write_tokens,
            usage.reasoning_tokens, usage.api_calls, usage.estimated_cost_usd,
        ) == (1200, 300, 800, 100, 50, 2, 0.0125)  # fmt: skip
        rows = messages_of(engine.store.connection(), CHAT, scope="context")
    theirs = [m for m in hermes["messages"] if m["session_id"] == CHAT]
    assert len(rows) == len(theirs) == 4
    for ours, row in zip(rows, theirs, strict=True):
        assert ours.uid == f"hermes:{row['id']}"
        assert (ours.role, ours.content, ours.at) == (
            row["role"],
            row["content"] or "",
            row["timestamp"],
        )
        assert (ours.tool_call_id, ours.tool_name, ours.finish_reason) == (
            row["tool_call_id"], row["tool_name"], row["finish_reason"],
        )  # fmt: skip
        assert (ours.reasoning, ours.reasoning_content, ours.token_count) == (
            row["reasoning"], row["reasoning_content"], row["token_count"],
        )  # fmt: skip
        calls = json.loads(row["tool_calls"]) if row["tool_calls"] else []
        assert ours.tool_calls == [
            {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in calls
        ]


def test_resume_sends_hermes_history_and_prompt_bytes(
    source: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """A resumed migrated session sends the original prompt bytes and Hermes' own history."""
    db, hermes = source
    with fake_model(strict=True) as server, SessionEngine.open(tmp_path / "state.db") as engine:
        import_hermes_db(engine.store, db)
        responder = OpenAICompatResponder(server.base_url, "gpt-test", stream=True)
        chat = Chat(
            engine, CHAT, responder=responder, config=HermesConfig(), profile_dir=tmp_path,
            tools=["read_file"], workspace=tmp_path,
        )  # fmt: skip
        out = chat.send("thanks")
        [request] = server.requests
    assert out.reply == "echo: thanks" and server.rejected == []
    sent = request["messages"]
    assert sent[0] == {"role": "system", "content": hermes["sessions"][CHAT]["system_prompt"]}
    expected = []
    for m in hermes["conversations"][CHAT]:
        wire: dict[str, Any] = {"role": m["role"], "content": m["content"]}
        if m.get("tool_calls"):
            wire["content"] = m["content"] or None
            wire["tool_calls"] = m["tool_calls"]
        if m["role"] == "tool":
            wire["tool_call_id"] = m["tool_call_id"]
            wire["name"] = m["tool_name"]
        expected.append(wire)
    assert sent[1:-1] == expected
    assert sent[-1] == {"role": "user", "content": "thanks"}


def test_rerun_imports_new_messages_once(
    source: tuple[Path, dict[str, Any]], hermes_python: Path, tmp_path: Path
) -> None:
    """A grown source adds its new messages and usage on the next run; a third run adds nothing."""
    db, _ = source
    grown_db = tmp_path / "hermes" / "state.db"
    grown_db.parent.mkdir()
    grown_db.write_bytes(db.read_bytes())
    with SessionEngine.open(tmp_path / "state.db") as engine:
        first = import_hermes_db(engine.store, grown_db)
        hermes = _hermes(hermes_python, "grow", grown_db)
        second = import_hermes_db(engine.store, grown_db)
        third = import_hermes_db(engine.store, grown_db)
        rows = messages_of(engine.store.connection(), CHAT, scope="context")
        usage = _usage(engine, CHAT)
    assert first.imported_messages == 6
    assert (second.imported_sessions, second.imported_messages, second.updated_sessions) == (
        0, 2, [CHAT],
    )  # fmt: skip
    assert (third.imported_messages, third.updated_sessions) == (0, [])
    assert sorted(third.already_present) == sorted([CHAT, CLI])
    assert [r.content for r in rows[-2:]] == ["and now?", "Freed 2 GB."]
    assert len(rows) == len([m for m in hermes["messages"] if m["session_id"] == CHAT])
    assert sum(u.tokens_in for u in usage) == hermes["sessions"][CHAT]["input_tokens"] == 1300
    assert sum(u.api_calls for u in usage) == 3
