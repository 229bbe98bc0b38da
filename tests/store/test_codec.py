"""Compressed event payloads: round trips, frozen dictionaries, old stores, deletes on disk."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_es import events as ev
from hermes_es.commands.delete import delete_session, scrub_wal
from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.catalog import SCHEMA_VERSION
from hermes_es.projections.rebuild import rebuild, verify
from hermes_es.queries.transcript import messages_as_of, messages_of
from hermes_es.store import codec
from hermes_es.store.zdict import CURRENT, DICTIONARIES

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

FROZEN = {
    1: "a4fd4d3c5c5005aebee08492b6357f45cc856a53f3f404bc15abb329e80f2849",
    2: "506425df73b4763e14cd2f574c0b8a0cc196d531a9cdf60da82a127faeb07470",
}
"""SHA-256 of every released dictionary: payloads written with one need exactly its bytes."""


def test_released_dictionaries_never_change() -> None:
    """Each released dictionary still has the bytes stored payloads were compressed with."""
    for dict_id, digest in FROZEN.items():
        assert hashlib.sha256(DICTIONARIES[dict_id]).hexdigest() == digest
    assert CURRENT in FROZEN


@given(st.binary(max_size=2000))
def test_any_payload_round_trips(payload: bytes) -> None:
    """pack then unpack gives back any byte string, including ones starting with the mark."""
    assert codec.unpack(codec.pack(payload)) == payload
    assert codec.unpack(codec.pack(b"\xc1" + payload)) == b"\xc1" + payload


DICT_1_FRAME = bytes.fromhex(
    "c101209a850200740203b06162636465666768696a6b6c6d6e6f70a76e74d94c61747372632f616e74696e"
    "706172732e0d00adc512980d1b0bcdb20047db2b531a1617908a868982229016496667bb270c0bec1dc81004"
)
"""A ``MessageAppended`` as the release before dictionary 2 stored it (``C1 01`` + frame)."""


def test_a_payload_compressed_with_dictionary_1_still_decodes() -> None:
    """Payloads the release before wrote (dictionary 1) decode; new ones use dictionary 2,
    a full dictionary (entropy tables and content), and come out smaller."""
    event = ev.decode(ev.MessageAppended.topic, DICT_1_FRAME)
    assert isinstance(event, ev.MessageAppended)
    assert event.message.content == (
        "Let me look at the file src/main.py and fix the error in the parse function."
    )
    assert (event.message.seq, event.message.uid, event.actor) == (3, "abcdefghijklmnop", "cli")
    again = codec.pack(ev.encode(event))
    assert again[:2] == bytes((codec.MARK, CURRENT)) == b"\xc1\x02"
    assert len(again) < len(DICT_1_FRAME)
    assert ev.decode(ev.MessageAppended.topic, again) == event


def test_plain_msgpack_of_the_old_release_decodes_unchanged() -> None:
    """A payload stored before compression (plain msgpack) decodes as it always did."""
    event = ev.MessageAppended(
        at=1.0, message=ev.Message(seq=0, uid="u", role="user", content="plain old payload")
    )
    plain = ev.encode(event)
    assert codec.unpack(plain) is plain
    assert ev.decode(event.topic, plain) == event


def test_a_chat_message_is_stored_compressed(tmp_path: Path) -> None:
    """The log row of an appended message is a compressed frame, smaller than its msgpack."""
    text = "Let me look at the file src/main.py and fix the error in the parse function. " * 3
    with SessionEngine.open(tmp_path) as engine:
        sid = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_message(sid, "user", text)
        conn = engine.store.connection()
        rows = conn.execute(
            "SELECT topic, state FROM events WHERE originator_id = ? AND topic = ?",
            (sid, ev.MessageAppended.topic),
        ).fetchall()
        (topic, stored) = rows[0]
        assert codec.is_packed(stored)
        plain = codec.unpack(stored)
        assert len(stored) < 0.8 * len(plain)
        assert text.encode() not in stored
        event = ev.decode(topic, stored)
        assert isinstance(event, ev.MessageAppended) and event.message.content == text
        # The recorder hands eventsourcing the payload it was given, not the stored frame.
        selected = engine.store.recorder.select_events(sid)
        assert any(s.state == plain for s in selected)


def test_a_corrupt_frame_is_a_decode_error_naming_the_payload() -> None:
    """A framed payload that does not decompress raises PayloadError (a msgspec DecodeError)."""
    with pytest.raises(codec.PayloadError, match="does not decompress"):
        codec.unpack(b"\xc1\x01not a zstd frame")
    with pytest.raises(codec.PayloadError, match="unknown dictionary 200"):
        codec.unpack(b"\xc1\xc8abc")


def _files(home: Path) -> bytes:
    return b"".join(f.read_bytes() for f in sorted(home.glob("state.db*")))


def test_deleting_a_session_leaves_none_of_its_compressed_payloads_on_disk(
    tmp_path: Path,
) -> None:
    """The byte scan still means something: the stored frames are found before, gone after."""
    marker = "PRIVATE-7f3a the user's secret words about their project, kept only here"
    with SessionEngine.open(tmp_path) as engine:
        keep = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_message(keep, "user", "a message that stays " * 4)
        sid = engine.start_session("cli", cwd=str(tmp_path))
        for k in range(5):
            engine.append_message(sid, "user", f"{marker} number {k}")
        conn = engine.store.connection()
        frames = [
            bytes(r[0])
            for r in conn.execute("SELECT state FROM events WHERE originator_id = ?", (sid,))
            if codec.is_packed(bytes(r[0]))
        ]
        assert len(frames) >= 5
        on_disk = _files(tmp_path)
        assert all(f in on_disk for f in frames)  # the scan finds stored frames
        assert marker.encode() in on_disk  # and the plain text of the read side
        delete_session(engine.store, sid)
        assert scrub_wal(engine.store)
    on_disk = _files(tmp_path)
    assert [f for f in frames if f[2:] in on_disk] == []
    assert marker.encode() not in on_disk


@pytest.mark.parametrize("layout", ["layout3", "layout7"])
def test_a_store_written_by_an_older_release_opens_and_upgrades(
    tmp_path: Path, layout: str
) -> None:
    """The layout-3 fixture (plain payloads) and the layout-7 one (text kept in a messages
    table) open with every event, transcript and as-of, replayed into the current layout."""
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(FIXTURES / f"{layout}-state.db", home / "state.db")
    expected = json.loads((FIXTURES / f"{layout}-expected.json").read_text(encoding="utf-8"))
    with SessionEngine.open(home) as engine:
        conn = engine.store.connection()
        log = [
            list(r)
            for r in conn.execute("SELECT originator_id, originator_version, topic FROM events")
        ]
        assert log == expected["events"]
        for sid, rows in expected["transcripts"].items():
            got = [[m.seq, m.role, m.content, m.state] for m in messages_of(conn, sid, scope="all")]
            assert got == rows
        as_of = [[m.seq, m.role, m.content] for m in messages_as_of(conn, "fixture-one", 4)]
        assert as_of == expected["as_of_4"]
        assert conn.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION
        kinds = dict(conn.execute("SELECT name, type FROM sqlite_schema").fetchall())
        assert kinds["messages"] == "view" and kinds["message_rows"] == "table"
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM sessions ORDER BY last_active DESC, id DESC LIMIT 5"
        ).fetchall()
        assert "sessions_last_active" in str(plan)
        assert [h.session_id for h in engine.search("snake_case_name")] == ["fixture-one"]
        # New events land compressed beside the old plain ones; both decode.
        engine.append_message("fixture-one", "user", "a new message after the upgrade " * 3)
        states = [bytes(r[0]) for r in conn.execute("SELECT state FROM events")]
        assert any(codec.is_packed(s) for s in states)
        assert any(s[:1] != b"\xc1" for s in states)
        total = len(states)
    assert all(d.equal for d in verify(home / "state.db"))
    assert total > len(expected["events"])
    assert rebuild(home / "state.db") == total
    assert all(d.equal for d in verify(home / "state.db"))
    assert b"DELETED-FIXTURE-TEXT" not in _files(home)
