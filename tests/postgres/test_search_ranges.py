"""PostgreSQL search reads the newest id ranges sized from the planner's statistics
(``newest_matches``): the same matches and scores as one statement over the whole index."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.store.postgres import id_blocks, search
from hermes_es.store.postgres.lexeme_shares import LexemeShares, lexeme_shares
from hermes_es.store.postgres.tokens import index_query, search_terms
from tests.pg_server import PgServer
from tests.postgres.search_reference import analyzed_store, whole_index

MESSAGES = 300


def _text(i: int) -> str:
    words = ["common"]
    if i % 7 == 0:
        words.append("sevens")
    if i in (3, 100, 201):
        words.append("rare")
    words.append("alpha beta" if i % 5 == 0 else "beta alpha")
    if i % 11 == 0:
        words.append("全文搜索")
    if i % 13 == 0:
        words.append("全文 搜索")  # the pairs of 全文搜索 but one, not the phrase
    if i % 3 == 0:
        words.append("chat-send src/main.py")
    return " ".join(words) + f" n{i}"


SMALL_BLOCKS = (12, 13, 15)
"""Id blocks of 1, 2 and 8 log positions (a message a position here), so that ranges of a
few rows take blocks of every level."""


@pytest.fixture(scope="module")
def engine(pg_server: PgServer) -> Iterator[SessionEngine]:
    """A PostgreSQL store of MESSAGES messages with terms of every frequency, analyzed, its
    rows in small id blocks (``SMALL_BLOCKS``, in force while the store is used)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(id_blocks, "BLOCK_SHIFTS", SMALL_BLOCKS)
        with analyzed_store(pg_server, MESSAGES, _text) as eng:
            yield eng


QUERIES = [
    "common",
    "sevens",
    "rare",
    '"alpha beta"',
    "alpha beta",
    "全文搜索",
    "chat-send",
    "src/main.py",
    "src/main.py sevens",
    "com*",
    "nothingatall",
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("size", [1, 5, 40, 1000])
@pytest.mark.parametrize("max_rows", [8, 40])
def test_ranges_find_the_newest_matches(
    engine: SessionEngine, query: str, size: int, max_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ranges of 8 or 40 rows (id blocks of every level), every query yields the newest
    ``size`` matches and their scores, exactly as one statement does, below a bound too; a
    term in many more rows than wanted is read by bounded ranges."""
    conn = engine.store.connection()
    monkeypatch.setattr(search, "MAX_RANGE_ROWS", max_rows)
    monkeypatch.setattr(search, "WALK_SHARE", 2.0)  # every term read by ranges
    calls: list[str | None] = []
    real = search._range

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(search, "_range", counted)
    newest = whole_index(conn, query, None, 1)
    for below in (None, newest[0][1] if newest else None):
        tsq = search.Query.of(query)
        assert tsq is not None
        got = search.newest_matches(conn, tsq, below, size, big=0)
        want = whole_index(conn, query, below, size)
        assert [m for _, m in got] == [m for _, m in want]
        assert [s for s, _ in got] == pytest.approx([s for s, _ in want])
    if query in ("sevens", "chat-send", "src/main.py") and size <= 5:
        assert any(blocks is not None for blocks in calls)  # bounded ranges, then the rest


def test_ranges_inside_a_transaction(engine: SessionEngine) -> None:
    """Inside the caller's transaction the ranges run on its connection, same matches."""
    conn = engine.store.connection()
    for query in ("sevens", "rare", "全文搜索"):
        tsq = search.Query.of(query)
        assert tsq is not None
        with conn.transaction():
            inside = search.newest_matches(conn, tsq, None, 40, big=0)
        assert inside == whole_index(conn, query, None, 40)


def test_search_messages_defaults_to_ranges(engine: SessionEngine) -> None:
    """search_messages' default gives the hits of session 5's one-statement window."""
    conn = engine.store.connection()
    for query in QUERIES:
        ranged = search.search_messages(conn, query, limit=20, where="", params=[], window=30)
        whole = search.search_messages(
            conn, query, limit=20, where="", params=[], window=30, sliced=False
        )
        assert [h.message_id for h in ranged] == [h.message_id for h in whole]


def test_shares_come_from_the_statistics(engine: SessionEngine) -> None:
    """The statistics give a listed lexeme its share, an unlisted one the smallest listed
    share, a phrase its rarest pair's share, a prefix the sum of the lexemes it covers (its
    prefix lexeme's share when it has one)."""
    shares = lexeme_shares(engine.store.connection())
    assert shares is not None
    assert shares.lexeme("common") == pytest.approx(1.0, abs=0.02)
    assert shares.lexeme("sevens") == pytest.approx(1 / 7, abs=0.02)
    assert shares.lexeme("no-such-lexeme") == shares.least
    made = LexemeShares({"a": 0.5, "ab": 0.1, "§a b": 0.2, "§b c": 0.05}, 0.01)
    assert made.query(search_terms("a")) == 0.5
    assert made.query(search_terms("a*")) == pytest.approx(0.6)
    assert made.query(search_terms('"a b c"')) == 0.05
    idents = LexemeShares({"\x1fa-b-c": 0.02, "\x1fa-b-cd": 0.03, "\x1fa-bc": 0.2}, 0.01)
    assert idents.query(search_terms("a-b-c")) == pytest.approx(0.05)  # the identifiers covered
    assert idents.query(search_terms("x-y")) == 0.01
    assert made.query(search_terms("a zz")) == pytest.approx(0.005)
    lexed = LexemeShares({"§<abc": 0.3, "abcd": 0.2, "abce": 0.05}, 0.01)
    assert lexed.query(search_terms("abc*")) == 0.3  # its prefix lexeme
    assert lexed.query(search_terms("abcd*")) == 0.2  # the lexemes it covers
    assert LexemeShares.of_rows(None, None) is None


def test_index_query_leaves_long_phrases_to_a_check() -> None:
    """A term of three tokens or more is found by its pairs and checked by its phrase; one
    or two tokens are answered by the index alone."""
    assert index_query('"chat send"') == ("('§chat send' | '§' & ('chat' <-> 'send'))", False)
    assert index_query("a b") == ("'a' & 'b'", False)
    assert index_query('"src main py"') == ("('§src main' & '§main py' | '§')", True)
    assert index_query("src/main.py") == ("'\x1fsrc/main.py':*", False)
    assert index_query("...") is None


def test_a_frequent_term_walks_the_primary_key(
    engine: SessionEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A term in most rows is read by walking the primary key backwards, no id range."""
    conn = engine.store.connection()
    walks: list[bool] = []
    real = search._slice

    def counted(*args: Any, **kwargs: Any) -> Any:
        walks.append(kwargs["walk"])
        return real(*args, **kwargs)

    monkeypatch.setattr(search, "_slice", counted)
    tsq = search.Query.of("common")
    assert tsq is not None
    got = search.newest_matches(conn, tsq, None, 40, big=0)
    assert walks == [True]
    assert got == whole_index(conn, "common", None, 40)
