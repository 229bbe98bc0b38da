"""``hermes_event_text`` (``projections/_hermes_text.c``) against its reference, the ``messages``
view's ``content`` (``hermes_message_text``, ``store/message_text.py``): on a real store the
same text for every message, read in C; on arbitrary payloads either NULL (the search then reads
the view) or the reference's text; and the search's hits the same with it and without.

Skips only where the compiled build cannot be made (as ``tests/projections/test_fts_compiled.py``)
or the system has no libzstd.
"""

from __future__ import annotations

import ctypes.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.catalog import connect
from hermes_es.queries import event_text, search
from hermes_es.queries.event_text import FUNCTION, compiled_text, message_keys, text_sql
from hermes_es.queries.search import search_messages
from hermes_es.store import codec, message_text
from tests.compiled_build import require_compiled_build

_PARTS = [
    {"type": "text", "text": "first part w1"},
    {"type": "image_url", "image_url": {"url": "https://x.io/a.png"}},
    {"type": "text", "text": "second part — 全文搜索"},
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Messages of every shape a store holds: text, parts, turns, an edit, a compaction."""
    require_compiled_build()
    if ctypes.util.find_library("zstd") is None:
        pytest.skip("no libzstd on this system: hit texts are read by the view")
    home = tmp_path_factory.mktemp("event-text")
    with SessionEngine.open(home) as engine:
        sid = engine.start_session("cli", cwd=str(home))
        engine.append_message(sid, "user", "w1 short")
        engine.append_message(sid, "user", "w1 " + "long text with words " * 400)
        engine.append_message(sid, "user", _PARTS)
        call = {"id": "call_1", "name": "read_file", "arguments": '{"path": "a"}'}
        engine.append_turn(
            sid,
            [
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "w1 tool output"},
                {
                    "role": "assistant",
                    "content": [{"type": "image_url", "image_url": {"url": "u"}}],
                    "tool_calls": [{**call, "id": "call_2"}],
                },
                {"role": "tool", "tool_call_id": "call_2", "content": _PARTS},
            ],
        )
        engine.append_message(sid, "user", "w1 nul \x00 and 'quotes' \U0001f600 café")
        engine.append_turn(
            sid,
            [
                {"role": "user", "content": f"w1 turn message {k}"}
                if k % 3
                else {"role": "assistant", "content": _PARTS}
                for k in range(12)
            ],
        )
        seq = engine.append_message(sid, "user", "w1 to be edited")
        engine.edit_message(sid, seq, "w1 edited text")
        archived = engine.append_turn(
            sid, [{"role": "user", "content": f"w1 old {k}"} for k in range(3)]
        )
        engine.compact(sid, archived, [{"role": "user", "content": "w1 summary of the old"}])
    return home / "state.db"


@pytest.fixture(scope="module")
def conn(store: Path) -> Iterator[apsw.Connection]:
    c = connect(store)
    yield c
    c.close()


def _c_only(conn: apsw.Connection, message_id: str) -> str:
    """``text_sql``'s C part alone (no fallback to the view)."""
    expr = text_sql(conn, message_id)
    assert expr.startswith("coalesce(")
    return expr[len("coalesce(") :].rsplit(", (SELECT content", 1)[0]


def test_every_message_is_read_in_c_with_the_views_text(conn: apsw.Connection) -> None:
    assert compiled_text(conn)
    c = _c_only(conn, "m.id")
    rows = conn.execute(f"SELECT m.id, {c}, m.content FROM messages m ORDER BY m.id").fetchall()
    topics = {t for (t,) in conn.execute("SELECT DISTINCT topic FROM events")}
    assert set(message_keys()) - topics <= {"hermes.history.imported"}  # every other shape here
    assert len(rows) > 20
    for message_id, fast, reference in rows:
        assert fast is not None, message_id
        assert fast == reference, message_id
    assert any(isinstance(r, str) and "\x00" in r for _, _, r in rows)


def test_the_shapes_are_message_texts(conn: apsw.Connection) -> None:
    """The topics and fields read are the reference's (``message_text``'s decoders)."""
    assert set(message_keys()) == set(message_text._shapes())


def _reference(topic: str, state: bytes, index: int) -> str | None:
    try:
        return message_text.make_function()(1, "s", 1, topic, state, index)
    except Exception:  # a payload the reference rejects: the C must not take it either
        return None


_TOPICS = sorted(message_keys())
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    st.binary(max_size=10),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["text", "type", "x", "content"]), inner, max_size=4),
    ),
    max_leaves=12,
)
_content = st.one_of(
    st.text(max_size=50),
    st.lists(
        st.dictionaries(st.sampled_from(["text", "type", "url", "1"]), _values, max_size=3),
        max_size=4,
    ),
    _values,
)
_message = st.dictionaries(
    st.sampled_from(["content", "role", "seq", "tool_calls"]),
    _content,
    max_size=4,
)
_extra = st.dictionaries(
    st.sampled_from(["at", "actor", "message", "messages", "x"]), _values, max_size=2
)


@st.composite
def _payloads(draw: st.DrawFn, key: str) -> dict[str, Any]:
    """Mostly the shape ``key``'s events have (one message, or a list), with other fields."""
    payload: dict[str, Any] = draw(_extra)
    if draw(st.integers(0, 9)):
        many = key != "message"
        if draw(st.integers(0, 9)) == 0:
            many = not many
        payload[key] = draw(st.lists(_message, max_size=4) if many else _message)
    return payload


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.data(),
    topic=st.sampled_from(_TOPICS),
    index=st.integers(min_value=-1, max_value=4),
    form=st.sampled_from(["packed", "plain", "escaped", "cut", "trailing"]),
)
def test_any_payload_is_null_or_the_references_text(
    conn: apsw.Connection, data: st.DataObject, topic: str, index: int, form: str
) -> None:
    raw = msgspec.msgpack.encode(data.draw(_payloads(message_keys()[topic])))
    state = {
        "packed": codec.pack(raw * 3),  # long enough to be compressed
        "plain": raw,
        "escaped": bytes((codec.MARK, codec.RAW)) + raw,
        "cut": codec.pack(raw * 3)[:-1],
        "trailing": raw + b"\x00",
    }[form]
    if form == "packed":
        state = codec.pack(raw) if len(codec.pack(raw)) < len(raw) else state
    key = message_keys()[topic]
    (fast,) = conn.execute(f"SELECT {FUNCTION}(?, ?, ?)", (state, index, key)).fetchone()
    if fast is not None:
        assert fast == _reference(topic, state, index)


@pytest.mark.parametrize(
    "state",
    [b"", b"\xc1", b"\xc1\x07abc", b"\xc1\x02\x00\x00", b"\x81\xa7message\x80\x80", b"\xff"],
)
def test_broken_payloads_are_left_to_the_reference(conn: apsw.Connection, state: bytes) -> None:
    for key in ("message", "messages"):
        assert conn.execute(f"SELECT {FUNCTION}(?, 0, ?)", (state, key)).fetchone() == (None,)


@pytest.mark.parametrize("query", ["w1", "part", "w1 turn", '"old"', "全文搜索", "edited"])
def test_search_hits_are_the_same_without_the_c_text(store: Path, query: str) -> None:
    fast, slow = connect(store), connect(store)
    try:
        assert compiled_text(fast)
        event_text._COMPILED[slow] = False  # this connection reads every text through the view
        for limit in (3, 50):
            for plan in search.PLANS:
                expected = search_messages(slow, query, limit=limit, plan=plan)
                assert search_messages(fast, query, limit=limit, plan=plan) == expected
                assert expected or query == "edited"
    finally:
        fast.close()
        slow.close()
