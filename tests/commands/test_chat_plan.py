"""A chat's split turn (``plan_turn``, ``respond``, ``recorded``) and its window conversions."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from hermes_es.commands.chat import Chat, dict_to_chat
from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.openai_messages import send_order, unanswered_calls
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


def test_the_kept_window_is_the_window_ordered_afresh_after_every_addition(
    tmp_path: Path,
) -> None:
    """The window kept between turns (only what was added is ordered and converted) equals
    the whole transcript ordered and converted afresh, whatever is added: plain turns, tool
    calls with their results, a late result for an older call (it moves up), orphan results,
    a call id used again; and a plan is refused exactly while a call is unanswered."""
    engine = SessionEngine(tmp_path / "state.db")
    try:
        chat = _chat(engine, tmp_path)
        sid = chat.session_id
        chat.send("start")
        rng = random.Random(9)
        made: list[str] = []
        for step in range(300):
            kind = rng.choice(["turn", "turn", "calls", "late", "orphan", "again"])
            added: list[dict[str, Any]] = []
            if kind == "turn":
                added = [
                    {"role": "user", "content": f"u{step}"},
                    {"role": "assistant", "content": f"a{step}"},
                ]
            elif kind == "calls":
                ids = [f"c{step}_{i}" for i in range(rng.randint(1, 3))]
                made.extend(ids)
                calls = [{"id": i, "name": "echo", "arguments": "{}"} for i in ids]
                answered = [i for i in ids if rng.random() < 0.7]
                rng.shuffle(answered)
                added = [
                    {"role": "assistant", "content": "", "tool_calls": calls},
                    *({"role": "tool", "content": i, "tool_call_id": i} for i in answered),
                ]
            elif kind == "late" and made:
                late = rng.choice(made)
                added = [{"role": "tool", "content": f"late {late}", "tool_call_id": late}]
            elif kind == "orphan":
                added = [{"role": "tool", "content": "x", "tool_call_id": f"none{step}"}]
            elif kind == "again" and made:
                again = rng.choice(made)
                added = [
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [{"id": again, "name": "echo"}],
                    },
                    {"role": "tool", "content": "again", "tool_call_id": again},
                ]
            chat.recorded(added, chat.version)
            if rng.random() < 0.5:
                continue  # sometimes several additions between two looks
            assert chat.window() == [dict_to_chat(m) for m in send_order(chat.memory)]
            planned = chat.plan_turn("next", engine.get(sid))
            assert (planned is None) == bool(unanswered_calls(chat.memory)), step
    finally:
        engine.close()


def test_the_offline_responder_answers_inline_unless_a_tool_is_asked_for() -> None:
    """``answers_inline``: a plain prompt needs no I/O; a tool trigger line does."""
    responder = OfflineResponder()
    assert responder.answers_inline("hello there")
    assert not responder.answers_inline("look\nrun: read_file notes.txt")
    assert not responder.answers_inline("/tool echo hi")
