"""The resume recap: last 10 exchanges, truncation, tool calls collapsed, system/tool hidden."""

from __future__ import annotations

from hermes_es.commands.engine import SessionEngine
from hermes_es.queries.recap import recap_lines, session_recap, truncate


def test_truncate_collapses_whitespace_and_marks_cut() -> None:
    """Long text is cut to max_chars with an ellipsis; short text is only whitespace-collapsed."""
    assert truncate("a  b\n c", 10) == ("a b c", False)
    text, cut = truncate("x" * 50, 10)
    assert cut and len(text) == 10 and text.endswith("…")


def test_caps_at_last_ten_exchanges(engine: SessionEngine) -> None:
    """Only the last 10 user-started exchanges appear, oldest first."""
    sid = engine.start_session("cli")
    for i in range(15):
        engine.append_turn(
            sid,
            [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}],
        )
    lines = recap_lines(engine.store.connection(), sid)
    assert [line.text for line in lines if line.role == "user"] == [f"q{i}" for i in range(5, 15)]
    assert lines[0].text == "q5" and lines[-1].text == "a14"


def test_tool_calls_collapsed_and_tool_results_and_system_hidden(engine: SessionEngine) -> None:
    """An assistant's tool calls become a count with names; tool results and system are hidden."""
    sid = engine.start_session("cli")
    engine.append_message(sid, "system", "SYSTEM NOTE")
    engine.append_turn(
        sid,
        [
            {"role": "user", "content": "count words"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c1", "name": "word_count", "arguments": "{}"},
                    {"id": "c2", "name": "echo", "arguments": "{}"},
                    {"id": "c3", "name": "echo", "arguments": "{}"},
                ],
            },
            {"role": "tool", "content": "TOOL OUTPUT", "tool_call_id": "c1"},
            {"role": "tool", "content": "TOOL OUTPUT", "tool_call_id": "c2"},
            {"role": "tool", "content": "TOOL OUTPUT", "tool_call_id": "c3"},
            {"role": "assistant", "content": "done"},
        ],
    )
    lines = recap_lines(engine.store.connection(), sid)
    assert [line.role for line in lines] == ["user", "assistant", "assistant"]
    assert lines[1].tool_count == 3 and lines[1].tool_names == ["word_count", "echo"]
    assert lines[1].tools_label == "[3 tool calls: word_count, echo]"
    assert all("TOOL OUTPUT" not in line.text and "SYSTEM" not in line.text for line in lines)


def test_long_messages_truncated(engine: SessionEngine) -> None:
    """A long message is shown cut to max_chars and flagged truncated."""
    sid = engine.start_session("cli")
    engine.append_turn(
        sid, [{"role": "user", "content": "w " * 500}, {"role": "assistant", "content": "ok"}]
    )
    lines = recap_lines(engine.store.connection(), sid, max_chars=40)
    assert lines[0].truncated and len(lines[0].text) == 40
    assert not lines[1].truncated


def test_recap_includes_messages_archived_in_place(engine: SessionEngine) -> None:
    """In-place compaction keeps archived turns in the recap (display history), not the summary."""
    sid = engine.start_session("cli", title="t")
    seqs = engine.append_turn(
        sid, [{"role": "user", "content": "old"}, {"role": "assistant", "content": "reply"}]
    )
    engine.compact(sid, seqs, [{"role": "system", "content": "summary"}])
    engine.append_turn(
        sid, [{"role": "user", "content": "new"}, {"role": "assistant", "content": "r2"}]
    )
    recap = session_recap(engine.store.connection(), sid)
    assert [line.text for line in recap.lines] == ["old", "reply", "new", "r2"]
    assert recap.title == "t" and recap.exchanges == 2 and recap.total_messages == 5
