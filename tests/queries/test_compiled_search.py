"""The compiled build's search functions (``projections/_hermes_fts5.c``) against their
references: ``hermes_bm25`` against FTS5's ``bm25()`` (the same float for every row, to the bit),
``hermes_sized_counts`` against ``hermes_term_counts``, ``hermes_snippet`` against
``Highlighter.snippet`` (``queries/snippets.py``) for any text and query; and a search on a
connection with only the Python tokenizer returns the compiled connection's hits, snippets and
scores included.

Skips only where the compiled build cannot be made (as ``tests/projections/test_fts_compiled.py``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_es.commands.engine import SessionEngine
from hermes_es.projections import fts
from hermes_es.projections.catalog import connect
from hermes_es.queries import bm25
from hermes_es.queries.fts_query import parse_terms
from hermes_es.queries.search import search_messages
from hermes_es.queries.snippets import TOKEN_SEPARATOR, Highlighter, compiled_snippets
from hermes_es.store.message_text import register_message_text
from tests.compiled_build import require_compiled_build

_WORDS = [f"w{k}" for k in range(40)] + [
    "co", "cob", "coz9", "coé", "Café", "chat-send", "src/main.py", "v1.2.3", "snake_case_name",
    "全文搜索", "検索エンジン", "세션", "a@b.com", "https://x.io/a?b=1", "—", "...", "x",
]  # fmt: skip
_SIZE = "(SELECT sz FROM messages_fts_docsize WHERE id = messages_fts.rowid)"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Messages of random words, identifiers and CJK, a few long ones."""
    require_compiled_build()
    rng = random.Random(20261202)
    home = tmp_path_factory.mktemp("compiled-search")
    with SessionEngine.open(home) as engine:
        sid = engine.start_session("cli", cwd=str(home))
        turn = [
            {"role": "user", "content": " ".join(rng.choices(_WORDS, k=rng.randint(1, 40)))}
            for _ in range(400)
        ]
        turn += [{"role": "user", "content": "w1 " * 5000 + "w2 w3"}]
        turn += [{"role": "assistant", "content": "… — …"}]
        engine.append_turn(sid, turn)
    return home / "state.db"


@pytest.fixture(scope="module")
def conn(store: Path) -> Iterator[apsw.Connection]:
    c = connect(store)
    yield c
    c.close()


_MATCHES = [
    '"w1"', '"w7"', '"w1" AND "w2"', '"w2" AND "w1" AND "w3"', '"w1 w2"', '"co"*',
    '("co" OR "coa"* OR "cob"*) AND "w5"', '"chat-send"', '"全文搜索" AND "w3"', '"w1" AND "w1"',
    '"\x1fsrc/main.py"*', '"nothing"',
]  # fmt: skip


@pytest.mark.parametrize("match", _MATCHES)
def test_hermes_bm25_is_bm25_to_the_bit(conn: apsw.Connection, match: str) -> None:
    """Every row's ``hermes_bm25`` (the length read from the docsize blob, or from FTS5 when
    none is given) is ``bm25()``'s float; ``hermes_sized_counts`` is ``hermes_term_counts``."""
    rows = conn.execute(
        "SELECT rowid, bm25(messages_fts), hermes_bm25(messages_fts, ?2),"
        f" hermes_bm25(messages_fts, {_SIZE}), hermes_bm25(messages_fts, NULL),"
        " hermes_term_counts(messages_fts, 1, 1),"
        f" hermes_sized_counts(messages_fts, {_SIZE}, 1, 1),"
        f" hermes_term_counts(messages_fts), hermes_sized_counts(messages_fts, {_SIZE})"
        " FROM messages_fts WHERE messages_fts MATCH ?1 ORDER BY rowid",
        (match, b"\xff"),  # a blob that is no size: FTS5's own length
    ).fetchall()
    if match != '"nothing"':
        assert rows
    for row in rows:
        assert row[1] == row[2] == row[3] == row[4], row
        assert row[5] == row[6] and row[7] == row[8], row


@pytest.mark.parametrize("words", [["w1"], ["w1", "w2"], ["w2", "w1", "w3"], ["w1", "w1"], ["全"]])
def test_hermes_bm25_with_given_rows_is_bm25(conn: apsw.Connection, words: list[str]) -> None:
    """Each phrase's rows handed over (as the search counts them: the vocabulary's ``doc``)
    give ``bm25()``'s floats, and are the ones used; a count that is not an integer for every
    phrase is ignored. (One call a statement: FTS5 keeps one auxiliary data per function and
    cursor, so calls of one statement share the first call's counts.)"""
    assert bm25.vocabulary(conn)
    match = " AND ".join(f'"{w}"' for w in words)
    counted = ", ".join(
        f"(SELECT doc FROM {bm25.VOCABULARY} WHERE term = ?{k + 2})" for k in range(len(words))
    )
    scores = {}
    for name, args in {
        "bm25": "",
        "counted": f", {counted}",
        "too many": f", {counted}, 1",
        "not integers": ", 'x'" * len(words),
        "wrong": ", 1" * len(words),
    }.items():
        scores[name] = conn.execute(
            f"SELECT bm25(messages_fts), hermes_bm25(messages_fts, {_SIZE}{args})"
            " FROM messages_fts WHERE messages_fts MATCH ?1 ORDER BY rowid",
            [match, *words] if "?2" in args else [match],
        ).fetchall()
    expected = [(b, b) for b, _ in scores["bm25"]]
    assert expected
    for name in ("bm25", "counted", "too many", "not integers"):
        assert scores[name] == expected, name
    assert all(s != b for b, s in scores["wrong"])  # the counts handed over are used


def test_hermes_bm25_with_an_estimate_is_the_window_plans_float(conn: apsw.Connection) -> None:
    """A phrase's rows handed over as a real (an estimate, as a one-word query at the count cap
    gets) give ``queries/bm25.py``'s formula with that float, to the bit."""
    rows, tokens = bm25.index_totals(conn)
    for hits in (123.456, 7.0, rows * 0.75, 1e-3):
        got = conn.execute(
            f"SELECT hermes_bm25(messages_fts, {_SIZE}, ?2),"
            " hermes_term_counts(messages_fts) FROM messages_fts WHERE messages_fts MATCH ?1",
            ('"w7"', hits),
        ).fetchall()
        assert got
        idf = bm25._idf(rows, hits)
        for score, packed in got:
            length, counts = bm25._unpack(packed)
            assert score == bm25._bm25(length, counts, [idf], tokens / rows), hits


@pytest.fixture
def window_pages(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The match of every window-plan page read in Python (``Candidates.page``), as they are
    read; a test clears it between searches."""
    read: list[str] = []
    original = bm25.Candidates.page

    def page(self: bm25.Candidates, *args: object, **kwargs: object) -> object:
        read.append(self.match)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bm25.Candidates, "page", page)
    return read


def test_a_word_at_the_count_cap_is_ranked_by_one_statement(
    conn: apsw.Connection, monkeypatch: pytest.MonkeyPatch, window_pages: list[str]
) -> None:
    """A word with at least ``COUNT_CAP`` matches is ranked in the fused statement with its rows
    estimated as the window plan estimates them: the same hits, order and floats as the window
    plan, and no window page read in Python."""
    monkeypatch.setattr(bm25, "COUNT_CAP", 30)
    for window, limit in ((20, 7), (10, 3), (20, 400)):
        fused = search_messages(conn, "w1", limit=limit, window=window)
        assert window_pages == [] or limit > window, (window, limit)
        window_pages.clear()
        reference = search_messages(conn, "w1", limit=limit, window=window, plan="window")
        assert [(h.message_id, h.score) for h in fused] == [
            (h.message_id, h.score) for h in reference
        ], (window, limit)
        window_pages.clear()


def test_several_words_are_counted_before_anything_else_is_read(
    conn: apsw.Connection, window_pages: list[str]
) -> None:
    """A several-word query: one statement counts its matches (and, only when they fit the
    window, looks its words up in the vocabulary); none: nothing more is read; some: one more
    statement ranks them with those rows handed in, the window plan's hits and scores; more than
    the window: the window plan ranks, and the compiled ranking never runs."""
    statements: list[str] = []

    def trace(cursor: apsw.Cursor, sql: str, bindings: object) -> bool:
        statements.append(sql)
        return True

    def searched(query: str, window: int) -> list[tuple[int, float]]:
        statements.clear()
        conn.exec_trace = trace
        try:
            hits = search_messages(conn, query, limit=20, window=window)
        finally:
            conn.exec_trace = None
        return [(h.message_id, h.score) for h in hits]

    assert searched("w5 nothing", 2000) == []
    matching = [s for s in statements if "MATCH" in s]
    assert len(matching) == 1 and "count(*)" in matching[0]
    hits = searched("w5 w7", 2000)
    matching = [s for s in statements if "MATCH" in s]
    assert len(matching) == 2 and bm25.VOCABULARY in matching[0]
    assert bm25.VOCABULARY not in matching[1] and "hermes_bm25(" in matching[1]
    assert hits and window_pages == []
    reference = search_messages(conn, "w5 w7", limit=20, plan="window")
    assert hits == [(h.message_id, h.score) for h in reference]
    window_pages.clear()
    assert searched("w1 w2", 5) != []
    assert window_pages, "more matches than the window: the window plan ranks"
    assert not any("hermes_bm25(" in s for s in statements)


@pytest.mark.parametrize(
    "match", ['"co"*', '("co" OR "coa"* OR "cob"* OR "coz"*)', '("w1" OR "w2"* OR "w3")']
)
def test_hermes_bm25_term_is_the_window_plans_float(conn: apsw.Connection, match: str) -> None:
    """``hermes_bm25_term`` scores the phrases of a short prefix's expansion as one term, as
    the window plan does (their counts summed, one idf from the term's rows, a count or an
    estimate), to the bit; without the rows as a number it refuses."""
    rows, tokens = bm25.index_totals(conn)
    phrases = match.count(" OR ") + 1
    for hits in (17, 123.456, rows * 0.75):
        got = conn.execute(
            f"SELECT hermes_bm25_term(messages_fts, {_SIZE}, ?2),"
            f" hermes_sized_counts(messages_fts, {_SIZE}, {phrases})"
            " FROM messages_fts WHERE messages_fts MATCH ?1",
            (match, hits),
        ).fetchall()
        assert got
        idf = bm25._idf(rows, float(hits))
        for score, packed in got:
            length, counts = bm25._unpack(packed)
            assert score == bm25._bm25(length, counts, [idf], tokens / rows), (match, hits)
    with pytest.raises(apsw.SQLError, match="rows must be a number"):
        conn.execute(
            f"SELECT hermes_bm25_term(messages_fts, {_SIZE}, 'x') FROM messages_fts"
            " WHERE messages_fts MATCH ?",
            (match,),
        ).fetchall()


@pytest.mark.parametrize("expanded", [False, True])
@pytest.mark.parametrize("cap", [3000, 30])
def test_a_prefix_is_ranked_by_one_statement(
    conn: apsw.Connection,
    monkeypatch: pytest.MonkeyPatch,
    window_pages: list[str],
    expanded: bool,
    cap: int,
) -> None:
    """A one-term prefix query (three characters and more: the prefix index; two: FTS5's
    merge on a small index, else the expansion) is counted and ranked in the fused statement:
    the same hits, order and floats as the window plan, and no window page read in Python;
    also above the count cap, where its rows are estimated."""
    monkeypatch.setattr(bm25, "COUNT_CAP", cap)
    if expanded:
        monkeypatch.setattr(bm25, "NATIVE_PREFIX_ROWS", 0)
    for query in ("co*", "w1*", "coz*", "w*", "nothing*"):
        for window, limit in ((20, 7), (10, 3)):
            fused = search_messages(conn, query, limit=limit, window=window)
            # expanded, w* is 1,333 phrases: the window plan's
            assert window_pages == [] or (expanded and query == "w*"), (query, window, limit)
            window_pages.clear()
            reference = search_messages(conn, query, limit=limit, window=window, plan="window")
            assert [(h.message_id, h.score) for h in fused] == [
                (h.message_id, h.score) for h in reference
            ], (query, window, limit)
            assert fused or query == "nothing*"
            window_pages.clear()


def test_the_scorer_is_the_compiled_one(conn: apsw.Connection, store: Path) -> None:
    """A compiled connection scores with ``hermes_bm25``, one with the Python tokenizer with
    ``bm25()``."""
    assert bm25.scorer(conn).startswith("hermes_bm25(")
    plain = apsw.Connection(str(store))
    fts.register_python_tokenizer(plain)
    try:
        assert bm25.scorer(plain) == "bm25(messages_fts)"
        assert not compiled_snippets(plain)
    finally:
        plain.close()


_PIECES = st.sampled_from(
    [
        *_WORDS,
        "W1",
        "CO",
        "é",
        "e\u0301",
        "日本",
        "ß",
        "İ",
        "ﬁ",
        "\u00a0",
        "\t",
        "\n",
        " ",
        "_",
        "-",
    ]
)


@st.composite
def texts(draw: st.DrawFn) -> str:
    pieces = draw(st.lists(st.one_of(_PIECES, st.text(max_size=6)), max_size=60))
    gaps = st.sampled_from(["", " ", "  ", "\n", "/", "."])
    joiners = draw(st.lists(gaps, min_size=len(pieces), max_size=len(pieces)))
    return "".join(p + j for p, j in zip(pieces, joiners, strict=True))


@st.composite
def queries(draw: st.DrawFn) -> str:
    term = st.one_of(_PIECES, st.text(min_size=1, max_size=4))
    terms = draw(st.lists(term, min_size=1, max_size=3))
    stars = draw(st.lists(st.booleans(), min_size=len(terms), max_size=len(terms)))
    return " ".join(
        t.replace("*", "") + ("*" if s else "") for t, s in zip(terms, stars, strict=True)
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts(), query=queries(), size=st.sampled_from([16, 1, 4, 5]))
def test_hermes_snippet_is_the_python_snippet(
    conn: apsw.Connection, text: str, query: str, size: int
) -> None:
    """``hermes_snippet`` cuts ``Highlighter.snippet``'s text for any text and query."""
    marker = Highlighter(conn, query)
    assert marker.compiled
    expr, args = marker.sql("?", 1, size)
    (got,) = conn.execute(f"SELECT {expr.replace('(?,', '(?3,')}", [*args, text]).fetchone()
    assert got == marker.snippet(text, size)


def test_hermes_snippet_edges(conn: apsw.Connection) -> None:
    """Adjacent hits share one pair of marks, a text without tokens gives its first 120
    characters, NULL gives NULL, and the separator splits the token lists."""
    cases = [
        ("w1w1", "w1"),
        ("w1 w1 w1", "w1"),
        ("全文搜索です", "全文"),
        ("— " * 100, "w1"),
        ("", "w1"),
        ("x" * 10 + " w3 " + "y " * 40, "w3 co*"),
        ("cob coz9 coé Café", "co* café"),
    ]
    for text, query in cases:
        marker = Highlighter(conn, query)
        expr, args = marker.sql("?3", 1)
        (got,) = conn.execute(f"SELECT {expr}", [*args, text]).fetchone()
        assert got == marker.snippet(text), (text, query)
    exact = TOKEN_SEPARATOR.join(["w1", "w2"])
    assert conn.execute("SELECT hermes_snippet(NULL, ?, '', 16)", [exact]).fetchone() == (None,)
    (got,) = conn.execute("SELECT hermes_snippet('w2 w0 w1', ?, '', 16)", [exact]).fetchone()
    assert got == "\x02w2\x03 w0 \x02w1\x03"


@pytest.mark.parametrize(
    "query",
    ["w1", "w7", "w1 w2", "w3 w5 w9", '"w1 w2"', "co*", "c*", "chat-send", "全文搜索", "café",
     "src/main.py", "snake_case_name w4", "nothing"],
)  # fmt: skip
def test_python_connection_finds_the_same_hits(
    conn: apsw.Connection, store: Path, query: str
) -> None:
    """A connection with only the Python tokenizer (``bm25()``, Python snippets and counts)
    returns the compiled connection's hits: rows, order, scores and snippets."""
    plain = apsw.Connection(str(store))
    fts.register_python_tokenizer(plain)
    register_message_text(plain)
    try:
        for limit in (5, 20, 1000):
            ours = search_messages(conn, query, limit=limit)
            theirs = search_messages(plain, query, limit=limit)
            assert ours == theirs, (query, limit)
            if parse_terms(query) and query != "nothing":
                assert ours
    finally:
        plain.close()
