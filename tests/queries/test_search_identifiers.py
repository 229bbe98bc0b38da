"""Identifier queries match identifier tokens as prefixes: longer identifiers, paths, upgrades."""

from __future__ import annotations

import re
from pathlib import Path

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_es.commands.delete import delete_session, scrub_wal
from hermes_es.commands.engine import SessionEngine
from hermes_es.projections import fts
from hermes_es.projections.catalog import SCHEMA_VERSION, connect
from hermes_es.projections.rebuild import verify
from hermes_es.queries.fts_query import parse_terms
from hermes_es.queries.identifiers import identifier_of
from hermes_es.queries.search import search_messages
from hermes_es.store.db import checkpoint
from tests.identifier_corpus import IDENTIFIER_TEXTS, RECALL_QUERIES, seeded_identifier_texts

TEXTS = IDENTIFIER_TEXTS


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    """A store holding ``TEXTS`` as one session's messages (seq 0 ...)."""
    with SessionEngine.open(tmp_path) as engine:
        sid = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_turn(sid, [{"role": "user", "content": t} for t in TEXTS])
    return tmp_path / "state.db"


def _seqs(db: Path, query: str) -> list[int]:
    conn = connect(db)
    try:
        return sorted(h.seq - 1 for h in search_messages(conn, query, limit=50))
    finally:
        conn.close()


def test_identifier_query_finds_longer_identifiers(store: Path) -> None:
    """``fenlocalex_4`` finds itself and ``fenlocalex_44364``, not the spaced or dashed forms."""
    base = _seqs(store, "fenlocalex")
    assert len(base) == 4
    first = base[0]
    assert [s - first for s in _seqs(store, "fenlocalex_4")] == [0, 1]
    assert [s - first for s in _seqs(store, "fenlocalex_44364")] == [0]
    assert [s - first for s in _seqs(store, "fenlocalex-4")] == [5]


def test_quoted_identifier_is_an_exact_phrase(store: Path) -> None:
    """In double quotes an identifier is its phrase of tokens, as before (no longer tokens)."""
    first = _seqs(store, "fenlocalex")[0]
    assert [s - first for s in _seqs(store, '"fenlocalex_4"')] == [1, 2, 5]


def test_path_query_matches_inside_a_longer_path(store: Path) -> None:
    """``src/main.py`` and ``main.py`` find ``/home/x/src/main.py``; ``http_404`` finds
    ``(HTTP_404)``; ``v1.2`` finds ``v1.2.3``; the snippet marks the identifier's words."""
    first = _seqs(store, "fenlocalex")[0]
    for query, seq in (("src/main.py", 3), ("main.py", 3), ("http_404", 4), ("v1.2", 4)):
        assert [s - first for s in _seqs(store, query)] == [seq], query
    conn = connect(store)
    try:
        (hit,) = search_messages(conn, "src/main.py")
    finally:
        conn.close()
    assert "\x02src\x03/\x02main\x03.\x02py\x03" in hit.snippet


def test_identifier_shapes() -> None:
    """Which terms are identifiers: runs of tokens joined by 1-3 bytes of punctuation, bare,
    at most ``IDENTIFIER_CHARS`` long."""
    conn = apsw.Connection("")
    fts.register_tokenizer(conn)
    shaped = {t.text: identifier_of(conn, t) for t in parse_terms(
        'snake_case HTTP_404 a://b word "quoted_id" a----b 模型 型_v2 ' + "x_" * 30
    )}  # fmt: skip
    assert shaped["snake_case"] == "\x1fsnake_case"
    assert shaped["HTTP_404"] == "\x1fhttp_404"
    assert shaped["a://b"] == "\x1fa://b"
    assert shaped["型_v2"] == "\x1f型_v2"
    for plain in ("word", "quoted_id", "a----b", "模型", "x_" * 30):
        assert shaped[plain] == "", plain


def _generic_runs(utf8: bytes, tokens: list[fts.Token]) -> list[tuple[int, int]]:
    """``fts.runs`` without its ASCII pre-check: the pass over every pair of tokens."""
    found, first = [], 0
    for i in range(1, len(tokens) + 1):
        if i < len(tokens) and fts._joined(utf8, tokens[i - 1][1], tokens[i][0]):
            continue
        if i - first >= 2:
            found.append((first, i))
        first = i
    return found


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("ab9 _.-/:\t\u00e9\u6a21")), max_size=30))
def test_runs_pre_check_loses_nothing(text: str) -> None:
    """The ASCII pre-check never hides a run the pass over the tokens would find."""
    conn = apsw.Connection("")
    plain = fts.make_tokenizer(conn.fts5_tokenizer(fts.BASE_TOKENIZER, list(fts.BASE_ARGS)))
    utf8 = text.encode()
    tokens = plain(utf8, apsw.FTS5_TOKENIZE_DOCUMENT, None)
    assert fts.runs(utf8, tokens) == _generic_runs(utf8, tokens)


def test_recall_equals_a_boundary_substring_scan(engine: SessionEngine) -> None:
    """On a seeded corpus of identifiers, each identifier query finds exactly the texts where
    a substring scan finds it starting at a token boundary (on both backends)."""
    texts = seeded_identifier_texts()
    sid = engine.start_session("cli", cwd="")
    engine.append_turn(sid, [{"role": "user", "content": t} for t in texts])
    checked = 0
    for query in RECALL_QUERIES:
        at_boundary = re.compile("(?<![a-z0-9])" + re.escape(query))
        truth = {i for i, t in enumerate(texts) if at_boundary.search(t)}
        assert {h.seq for h in engine.search(query, limit=1000)} == truth, query
        checked += len(truth)
    assert checked > 20


def _vocab(conn: apsw.Connection) -> set[str]:
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.v USING fts5vocab(main, messages_fts, row)"
    )
    return {str(r[0]) for r in conn.execute("SELECT term FROM temp.v")}


def test_deleted_identifier_tokens_are_gone(tmp_path: Path) -> None:
    """A deleted message's identifier tokens leave the index and no byte of them stays on disk."""
    with SessionEngine.open(tmp_path) as engine:
        sid = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_message(sid, "user", "secret zqxident_77231/path.txt here")
        keep = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_message(keep, "user", "other words")
        conn = engine.store.connection()
        assert "\x1fzqxident_77231/path.txt" in _vocab(conn)
        checkpoint(conn, truncate=False)
        delete_session(engine.store, sid)
        assert not any("zqxident" in t for t in _vocab(conn))
        assert scrub_wal(engine.store)
    for f in tmp_path.glob("state.db*"):
        assert b"zqxident_77231" not in f.read_bytes(), f.name


def _as_layout_10(store: Path) -> None:
    """Turn ``store`` into a layout-10 one: its index holds the words only."""
    conn = connect(store)
    conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('delete-all')")
    rows = conn.execute("SELECT id, content FROM messages").fetchall()
    plain = apsw.Connection("")  # the layout-10 tokens: the words only
    tok = fts.make_tokenizer(plain.fts5_tokenizer(fts.BASE_TOKENIZER, list(fts.BASE_ARGS)))
    conn.execute("CREATE TEMP TABLE old_tokens(x)")  # the rows went in through FTS5 as before
    for rowid, text in rows:
        words = " ".join(t[2] for t in tok(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None))
        conn.execute("INSERT INTO messages_fts(rowid, content) VALUES (?, ?)", (rowid, words))
    assert not any(t.startswith("\x1f") for t in _vocab(conn))
    conn.execute("PRAGMA user_version = 10")
    conn.close()


def test_layout_10_store_is_reindexed_on_open(store: Path) -> None:
    """A layout-10 store (index without identifier tokens) gets them when opened: the old
    messages are found by an identifier prefix, with no replay of the projections."""
    _as_layout_10(store)
    conn = connect(store, readonly=True)
    heads = conn.execute("SELECT count(*) FROM sessions").fetchall()
    conn.close()
    assert len(_seqs(store, "fenlocalex_4")) == 2
    conn = connect(store)
    try:
        assert conn.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION
        assert conn.execute("SELECT count(*) FROM sessions").fetchall() == heads
        assert "\x1ffenlocalex_44364" in _vocab(conn)
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
    finally:
        conn.close()
    diffs = verify(store)  # the upgraded index equals one a rebuild writes
    assert diffs and all(d.equal for d in diffs), diffs


def test_layout_11_upgrade_reports_progress_and_indexes_every_row(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The layout-11 re-index of a big store says on stderr what it does and how far it is,
    batch by batch, and ends with every row indexed once (as FTS5's own rebuild would)."""
    from hermes_es.projections import catalog

    _as_layout_10(store)
    monkeypatch.setattr(catalog, "UPGRADE_PROGRESS_MIN", 1)
    monkeypatch.setattr(catalog, "REINDEX_BATCH", 2)
    capsys.readouterr()
    conn = connect(store)
    try:
        rows = conn.execute("SELECT count(*) FROM message_rows").fetchall()[0][0]
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
        assert "\x1ffenlocalex_44364" in _vocab(conn)
    finally:
        conn.close()
    err = capsys.readouterr().err
    assert rows == len(TEXTS) > 2
    assert f"search (layout 11), once, {rows:,} messages\n" in err
    assert f": {rows:,} of {rows:,} messages" in err
    diffs = verify(store)
    assert diffs and all(d.equal for d in diffs), diffs
