"""The chat turn use case: recording, context, compaction, rewind, media, recovery, concurrency."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hermes_es.commands.chat import Chat, fork_session
from hermes_es.commands.delete import delete_session
from hermes_es.commands.engine import SessionEngine
from hermes_es.config import HermesConfig, SessionsConfig
from hermes_es.errors import InvariantError
from hermes_es.queries.transcript import messages_of
from hermes_es.responders.base import ChatMessage, TurnResult
from hermes_es.responders.offline import OfflineResponder


class Recording(OfflineResponder):
    """The offline responder, remembering what each turn was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list[ChatMessage]]] = []

    def respond(
        self,
        system_prompt: str,
        messages: list[ChatMessage],
        *,
        model: str,
        reasoning: str | None = None,
        **options: Any,
    ) -> TurnResult:
        self.calls.append((system_prompt, list(messages)))
        return super().respond(system_prompt, messages, model=model, reasoning=reasoning, **options)


def _chat(
    engine: SessionEngine,
    tmp_path: Path,
    sid: str | None = None,
    *,
    mode: str = "in_place",
    keep: int = 2,
    responder: OfflineResponder | None = None,
) -> Chat:
    config = HermesConfig(sessions=SessionsConfig(compress_mode=mode, compress_keep_last=keep))  # type: ignore[arg-type]
    sid = sid or engine.start_session("cli", tools=["echo"], cwd=str(tmp_path))
    return Chat(
        engine,
        sid,
        responder=responder or OfflineResponder(),
        config=config,
        profile_dir=tmp_path,
        tools=["echo"],
        workspace=tmp_path,
    )


def test_turn_records_user_then_responder_turn(engine: SessionEngine, tmp_path: Path) -> None:
    """A tool-using turn stores the user message, tool call, tool result and reply in order."""
    chat = _chat(engine, tmp_path)
    out = chat.send("please\nrun: word_count a b c")
    rows = messages_of(engine.store.connection(), chat.session_id, scope="all")
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[2].content == "3" and rows[1].tool_calls[0]["name"] == "word_count"
    assert out.seqs == [0, 1, 2, 3] and "3" in out.reply


def test_context_is_stored_prompt_plus_active_window(engine: SessionEngine, tmp_path: Path) -> None:
    """Each turn sends the stored prompt bytes and the active window only (rewound turns gone)."""
    responder = Recording()
    chat = _chat(engine, tmp_path, responder=responder)
    chat.send("first")
    chat.send("second")
    chat.rewind(1)
    chat.send("third")
    stored = engine.stored_prompt(chat.session_id)
    prompts = {p for p, _ in responder.calls}
    assert prompts == {stored}
    last = [m.content for m in responder.calls[-1][1]]
    assert last[0] == "first" and last[-1] == "third" and "second" not in last


def test_compress_in_place_keeps_full_display_history(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """In-place /compress archives older turns behind a summary; display still has them all."""
    chat = _chat(engine, tmp_path, mode="in_place", keep=2)
    for i in range(4):
        chat.send(f"message {i}")
    out = chat.compress()
    conn = engine.store.connection()
    display = messages_of(conn, chat.session_id, scope="display")
    context = messages_of(conn, chat.session_id, scope="context")
    assert out.mode == "in_place" and out.archived == 6 and out.kept == 2
    assert sum(1 for m in display if m.compacted) == 6
    assert [m.content for m in display if m.role == "user"] == [f"message {i}" for i in range(4)]
    assert context[0].role == "system" and "Summary" in context[0].content
    assert context[1].content == "message 3"


def test_compress_split_child_inherits_source_and_lineage_title(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """Split /compress continues in a child with the parent's source and a #2 title."""
    sid = engine.start_session("oneshot", title="proj", cwd=str(tmp_path))
    chat = _chat(engine, tmp_path, sid, mode="split", keep=2)
    for i in range(3):
        chat.send(f"m{i}")
    out = chat.compress()
    child = engine.get(out.session_id)
    chat.send("after")
    parent = engine.get(sid)
    rows = messages_of(engine.store.connection(), out.session_id)
    assert out.session_id != sid and child.source == "oneshot" and child.title == "proj #2"
    assert parent.continued_into == out.session_id
    assert rows[0].role == "system" and rows[-2].content == "after"


def test_compress_refuses_when_nothing_older(engine: SessionEngine, tmp_path: Path) -> None:
    """/compress on a short session is refused with a clear message."""
    chat = _chat(engine, tmp_path, keep=10)
    chat.send("only")
    with pytest.raises(InvariantError, match="nothing to compress"):
        chat.compress()


def test_attachment_handled_once_as_text(engine: SessionEngine, tmp_path: Path) -> None:
    """A document named in a message is extracted once; later turns carry only that text."""
    doc = tmp_path / "notes.md"
    doc.write_text("# Notes\nthe secret word is mango\n")
    responder = Recording()
    chat = _chat(engine, tmp_path, responder=responder)
    out = chat.send(f"read {doc}")
    doc.unlink()
    chat.send("what was the word?")
    stored = messages_of(engine.store.connection(), chat.session_id)
    assert out.attachments and "document" in out.attachments[0]
    assert stored[0].media[0]["path"] == str(doc) and "mango" in stored[0].media[0]["text"]
    first_user = responder.calls[-1][1][0].content
    assert isinstance(first_user, str) and "mango" in first_user


def test_deleted_open_session_is_recreated_on_next_save(
    engine: SessionEngine, tmp_path: Path
) -> None:
    """Deleting a session under an open chat: the next turn recreates it under the same id."""
    chat = _chat(engine, tmp_path)
    chat.send("one")
    chat.send("two")
    delete_session(engine.store, chat.session_id)
    chat.send("three")
    rows = messages_of(engine.store.connection(), chat.session_id)
    assert [r.content for r in rows if r.role == "user"] == ["one", "two", "three"]


def test_two_writers_lose_nothing(engine: SessionEngine, tmp_path: Path) -> None:
    """Two chats on one session: the stale one reloads and retries, every message is kept."""
    a = _chat(engine, tmp_path)
    b = _chat(engine, tmp_path, a.session_id)
    a.send("from a")
    b.send("from b")
    a.send("from a again")
    rows = messages_of(engine.store.connection(), a.session_id)
    users = [r.content for r in rows if r.role == "user"]
    assert users == ["from a", "from b", "from a again"]
    assert len(rows) == 6


def test_fork_copies_context_into_branch(engine: SessionEngine, tmp_path: Path) -> None:
    """A fork is a new session with parent_kind branch holding a copy of the context window."""
    chat = _chat(engine, tmp_path)
    chat.send("run: echo hi")
    child = fork_session(engine, chat.session_id)
    state = engine.get(child)
    rows = messages_of(engine.store.connection(), child)
    assert state.parent_id == chat.session_id and state.parent_kind == "branch"
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]


def test_reasoning_level_validated_and_recorded(engine: SessionEngine, tmp_path: Path) -> None:
    """/reasoning records a known level on the session and rejects unknown ones."""
    chat = _chat(engine, tmp_path)
    chat.set_reasoning("high")
    assert engine.get(chat.session_id).reasoning == "high"
    with pytest.raises(Exception, match="reasoning level"):
        chat.set_reasoning("ultra")


def test_attached_audio_is_transcribed_once_by_the_configured_command(tmp_path: Path) -> None:
    """With media.transcribe_command set, an attached audio file's transcript is stored once."""
    import sys

    from hermes_es.config import MediaConfig

    clip = tmp_path / "memo.wav"
    clip.write_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt " + b"\x00" * 64)
    script = "print('the quarterly numbers are up')"
    config = HermesConfig(media=MediaConfig(transcribe_command=[sys.executable, "-c", script]))
    with SessionEngine.open(tmp_path / "home") as engine:
        sid = engine.start_session("cli", tools=["echo"], cwd=str(tmp_path))
        chat = Chat(
            engine,
            sid,
            responder=OfflineResponder(),
            config=config,
            profile_dir=tmp_path,
            tools=["echo"],
            workspace=tmp_path,
        )
        chat.attach(clip)
        out = chat.send("what does the memo say?")
        stored = messages_of(engine.store.connection(), sid)
    assert out.attachments and "audio" in out.attachments[0]
    user = next(m for m in stored if m.role == "user")
    assert "the quarterly numbers are up" in user.media[0]["text"]
