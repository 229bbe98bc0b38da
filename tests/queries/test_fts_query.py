"""build_match and query_terms: arbitrary user input becomes a safe FTS5 MATCH expression."""

from __future__ import annotations

from collections.abc import Iterator

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_es.projections.fts import create_fts_sql, register_tokenizer
from hermes_es.queries.fts_query import build_match, parse_terms, query_terms


@pytest.mark.parametrize(
    ("user_query", "expected"),
    [
        ("hello", '"hello"'),
        ("hello world", '"hello" AND "world"'),
        ("chat-send", '"chat-send"'),
        ("P2.2", '"P2.2"'),
        ("a@b.com", '"a@b.com"'),
        ("https://x.y/z?q=1", '"https://x.y/z?q=1"'),
        ("refact*", '"refact"*'),
        ("refact**", '"refact"*'),
        ('say "exact phrase"', '"say" AND "exact phrase"'),
        ('"exact phr"*', '"exact phr"*'),
        ('"unbalanced quote', '"unbalanced quote"'),
        ('it"s', '"it" AND "s"'),
        ("-term", '"-term"'),
        ("NEAR(a b)", '"NEAR(a" AND "b)"'),
        ("content:x ^y", '"content:x" AND "^y"'),
        ("模型 搜索", '"模型" AND "搜索"'),
        ("a\x00b\tc", '"a" AND "b" AND "c"'),
        ("x OR y NOT z", '"x" AND "OR" AND "y" AND "NOT" AND "z"'),
    ],
)
def test_build_match_quotes_every_term(user_query: str, expected: str) -> None:
    """Each term becomes a quoted phrase ANDed with the others; syntax stays literal."""
    assert build_match(user_query) == expected


@pytest.mark.parametrize("user_query", ["", "   ", "*", '""', '" "', "((", "-- ... !!", "\x00\x01"])
def test_build_match_none_when_nothing_searchable(user_query: str) -> None:
    """Input with no letter or digit yields None."""
    assert build_match(user_query) is None


def test_build_match_drops_punctuation_only_terms() -> None:
    """Terms of pure punctuation vanish and the rest still match."""
    assert build_match("foo -- & bar") == '"foo" AND "bar"'


def test_query_terms_gives_plain_text() -> None:
    """query_terms returns each term without quotes or prefix stars, in order."""
    assert query_terms('refact* "exact  phrase" chat-send ??') == [
        "refact",
        "exact phrase",
        "chat-send",
    ]


def test_parse_terms_marks_prefixes() -> None:
    """Only terms followed by '*' are prefix terms."""
    assert [(t.text, t.prefix) for t in parse_terms('ab* "c d"* e')] == [
        ("ab", True),
        ("c d", True),
        ("e", False),
    ]


@pytest.fixture(scope="module")
def fts_conn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[apsw.Connection]:
    """A real state file with a messages table and its hermes FTS index."""
    conn = apsw.Connection(str(tmp_path_factory.mktemp("fts") / "state.db"))
    register_tokenizer(conn)
    conn.execute("CREATE TABLE messages(id INTEGER PRIMARY KEY, content TEXT)")
    conn.execute(create_fts_sql())
    texts = ["hello world", "chat-send P2.2", "模型 搜索", "NEAR a b", 'quote "x" here']
    with conn:
        conn.executemany("INSERT INTO messages(content) VALUES(?)", ((t,) for t in texts))
        conn.execute("INSERT INTO messages_fts(rowid, content) SELECT id, content FROM messages")
    yield conn
    conn.close()


SYNTAX = st.text(alphabet=st.sampled_from(list('"*-:^()+{}., \tNEAROTDab模검\x00')), max_size=30)


@settings(max_examples=200, deadline=None)
@given(user_query=st.one_of(st.text(), SYNTAX))
def test_build_match_never_breaks_match(fts_conn: apsw.Connection, user_query: str) -> None:
    """Any text yields None or an expression FTS5 accepts in MATCH."""
    match = build_match(user_query)
    if match is not None:
        fts_conn.execute(
            "SELECT rowid, snippet(messages_fts, 0, '[', ']', '…', 8) FROM messages_fts "
            "WHERE messages_fts MATCH ?",
            (match,),
        ).fetchall()


def test_quoted_input_finds_literal_text(fts_conn: apsw.Connection) -> None:
    """A query holding FTS5 syntax words finds the message containing them as text."""
    rows = fts_conn.execute(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (build_match("NEAR a"),)
    )
    assert rows.fetchall() == [(4,)]
