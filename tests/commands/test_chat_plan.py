"""A chat's split turn (``plan_turn``, ``respond``, ``recorded``) and its window conversions."""

from __future__ import annotations

from pathlib import Path

from hermes_es.commands.chat import Chat
from hermes_es.commands.engine import SessionEngine
from hermes_es.config import HermesConfig
from hermes_es.responders.offline import OfflineResponder


def _chat(engine: SessionEngine, tmp_path: Path) -> Chat:
    sid = engine.start_session("cli", tools=["echo"], cwd=str(tmp_path))
    return Chat(
        engine,
        sid,
        responder=OfflineResponder(),
        config=HermesConfig(),
        profile_dir=tmp_path,
        tools=["echo"],
        workspace=tmp_path,
    )


def test_plan_turn_only_plans_a_turn_that_needs_no_write_of_its_own(tmp_path: Path) -> None:
    """Before the first turn (no prompt in memory) there is no plan; after it a plain text
    has one, with the stored prompt's exact bytes; a text naming an existing file, an
    attachment, an empty text or a requested prompt refresh go through ``send``."""
    engine = SessionEngine(tmp_path / "state.db")
    try:
        chat = _chat(engine, tmp_path)
        sid = chat.session_id
        assert chat.plan_turn("hello", engine.get(sid)) is None
        chat.send("hello")
        plan = chat.plan_turn("again", engine.get(sid))
        assert plan is not None
        assert plan.prompt == engine.stored_prompt(sid)
        assert plan.user == {"role": "user", "content": "again", "media": []}
        (tmp_path / "notes.txt").write_text("x")
        named = f"read {tmp_path / 'notes.txt'} please"
        assert chat.plan_turn(named, engine.get(sid)) is None
        assert chat.plan_turn("a.b is no file here", engine.get(sid)) is not None
        assert chat.plan_turn("   ", engine.get(sid)) is None
        chat.attach(tmp_path / "notes.txt")
        assert chat.plan_turn("again", engine.get(sid)) is None
        chat.pending_attachments.clear()
        engine.request_prompt_refresh([sid])
        assert chat.plan_turn("again", engine.get(sid)) is None
    finally:
        engine.close()


def test_a_split_turn_gives_the_responder_what_send_gives_it(tmp_path: Path) -> None:
    """A turn run as ``plan_turn`` + (stored elsewhere) ``recorded`` + ``respond`` sends the
    responder the same window as ``send`` would, and a window changed by another writer
    is not planned on (the chat reloads through ``send``)."""
    engine = SessionEngine(tmp_path / "state.db")
    try:
        chat = _chat(engine, tmp_path)
        sid = chat.session_id
        chat.send("first")
        plan = chat.plan_turn("second", engine.get(sid))
        assert plan is not None
        seqs = engine.append_turn(sid, [plan.user])
        chat.recorded([plan.user], engine.get(sid).version)
        answer = chat.respond(plan.prompt)
        assert answer.reply == 'Offline reply: you said "second" (1 word).'
        engine.append_turn(sid, answer.dicts)
        chat.recorded(answer.dicts, engine.get(sid).version)
        assert seqs == [2]
        fresh = _chat(engine, tmp_path)
        fresh.session_id = sid
        fresh.reload()
        assert chat.window() == fresh.window()
        engine.append_message(sid, "user", "from another writer")
        assert chat.plan_turn("third", engine.get(sid)) is None
    finally:
        engine.close()


def test_window_converts_each_message_once_and_a_reload_starts_afresh(tmp_path: Path) -> None:
    """``window`` reuses what it converted for messages still in memory, converts only the
    new ones, and after a reload (the transcript read again) converts everything anew."""
    engine = SessionEngine(tmp_path / "state.db")
    try:
        chat = _chat(engine, tmp_path)
        chat.send("one")
        first = chat.window()
        chat.send("two")
        second = chat.window()
        assert [m is n for m, n in zip(first, second, strict=False)] == [True, True]
        assert second[2].content == "two"
        chat.reload()
        third = chat.window()
        assert third == second
        assert not any(m is n for m, n in zip(second, third, strict=True))
    finally:
        engine.close()


def test_the_offline_responder_answers_inline_unless_a_tool_is_asked_for() -> None:
    """``answers_inline``: a plain prompt needs no I/O; a tool trigger line does."""
    responder = OfflineResponder()
    assert responder.answers_inline("hello there")
    assert not responder.answers_inline("look\nrun: read_file notes.txt")
    assert not responder.answers_inline("/tool echo hi")
