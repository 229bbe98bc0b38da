"""The hermes tokenizer and the external-content FTS5 message index, on a real SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_es.errors import ValidationError
from hermes_es.projections.fts import (
    TOKENIZER_NAME,
    contains_cjk,
    create_fts_sql,
    register_tokenizer,
)
from hermes_es.queries.fts_query import build_match

ROWS = {
    1: "The quick brown fox jumps over the lazy dog at the Café.",
    2: "Run chat-send after milestone P2.2 lands; see snake_case_name in utils.",
    3: "Mail alice.smith@example.com about the report.",
    4: "Docs at https://docs.example.org/search?q=fts5&page=2 explain it.",
    5: "我们今天讨论了如何使用大型语言模型进行全文搜索，以及中文分词的问题。",
    6: "日本語のテキストを全文検索できるようにしたいと思っています。",
    7: "한국어 검색엔진을 위한 토크나이저를 테스트합니다.",
    8: "We refactored the GPT4模型 pipeline yesterday.",
    9: "send chat later, nothing about milestones here.",
}


def open_db(path: Path) -> apsw.Connection:
    """Open ``path`` with the hermes tokenizer registered."""
    conn = apsw.Connection(str(path))
    register_tokenizer(conn)
    return conn


def make_db(path: Path, rows: dict[int, str]) -> apsw.Connection:
    """Create messages + messages_fts in ``path`` and index ``rows``."""
    conn = open_db(path)
    conn.execute(
        "CREATE TABLE messages(id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT)"
    )
    conn.execute(create_fts_sql())
    with conn:
        conn.executemany(
            "INSERT INTO messages(id, session_id, role, content) VALUES(?, 's1', 'user', ?)",
            rows.items(),
        )
        conn.execute("INSERT INTO messages_fts(rowid, content) SELECT id, content FROM messages")
    return conn


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[apsw.Connection]:
    """A state file holding ROWS, indexed."""
    connection = make_db(tmp_path / "state.db", ROWS)
    yield connection
    connection.close()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[apsw.Connection]:
    """An empty database file with the hermes tokenizer registered."""
    connection = open_db(tmp_path / "t.db")
    yield connection
    connection.close()


def search(conn: apsw.Connection, user_query: str) -> dict[int, str]:
    """Run ``user_query`` through build_match; map matching ids to their highlighted text."""
    match = build_match(user_query)
    assert match is not None
    rows = conn.execute(
        "SELECT rowid, highlight(messages_fts, 0, '[', ']') FROM messages_fts "
        "WHERE messages_fts MATCH ? ORDER BY rowid",
        (match,),
    )
    return {rowid: text for rowid, text in rows}


def test_english_word_found_case_and_accent_insensitively(conn: apsw.Connection) -> None:
    """An English word matches regardless of case, and 'cafe' matches 'Café'."""
    assert search(conn, "QUICK fox") == {
        1: ROWS[1].replace("quick", "[quick]").replace("fox", "[fox]")
    }
    assert search(conn, "cafe") == {1: ROWS[1].replace("Café", "[Café]")}


def test_hyphenated_identifier_matches_as_phrase(conn: apsw.Connection) -> None:
    """'chat-send' finds the adjacent words in order, not 'send chat'."""
    assert search(conn, "chat-send") == {2: ROWS[2].replace("chat-send", "[chat-send]")}
    assert set(search(conn, "send")) == {2, 9}


def test_dotted_and_snake_case_identifiers_found(conn: apsw.Connection) -> None:
    """'P2.2' and 'snake_case_name' each find their message, highlighted whole."""
    assert search(conn, "P2.2") == {2: ROWS[2].replace("P2.2", "[P2.2]")}
    assert search(conn, "snake_case_name") == {
        2: ROWS[2].replace("snake_case_name", "[snake_case_name]")
    }


def test_email_found_whole_and_by_part(conn: apsw.Connection) -> None:
    """An email address matches as typed, and its local part alone matches too."""
    email = "alice.smith@example.com"
    assert search(conn, email) == {3: ROWS[3].replace(email, f"[{email}]")}
    assert set(search(conn, "alice.smith")) == {3}


def test_url_found(conn: apsw.Connection) -> None:
    """A full URL with query string finds its message and is highlighted whole."""
    url = "https://docs.example.org/search?q=fts5&page=2"
    assert search(conn, url) == {4: ROWS[4].replace(url, f"[{url}]")}


def test_chinese_two_character_substring_found(conn: apsw.Connection) -> None:
    """A two-character word inside a long Chinese sentence matches and is highlighted."""
    assert search(conn, "模型") == {
        5: ROWS[5].replace("模型", "[模型]"),
        8: ROWS[8].replace("模型", "[模型]"),
    }
    assert search(conn, "分词") == {5: ROWS[5].replace("分词", "[分词]")}


def test_chinese_characters_must_be_adjacent(conn: apsw.Connection) -> None:
    """Two characters present but not adjacent do not match as a word."""
    assert search(conn, "今论") == {}


def test_japanese_substring_found(conn: apsw.Connection) -> None:
    """Kanji and katakana substrings of a Japanese sentence match."""
    assert search(conn, "検索") == {6: ROWS[6].replace("検索", "[検索]")}
    assert search(conn, "テキスト") == {6: ROWS[6].replace("テキスト", "[テキスト]")}


def test_korean_substring_inside_word_found(conn: apsw.Connection) -> None:
    """A Korean stem matches inside a word carrying a particle (검색 in 검색엔진을)."""
    assert search(conn, "검색") == {7: ROWS[7].replace("검색", "[검색]")}


def test_mixed_latin_cjk_token_found_by_either_part(conn: apsw.Connection) -> None:
    """'GPT4模型' is findable as 'gpt4' and as '模型'."""
    assert search(conn, "gpt4") == {8: ROWS[8].replace("GPT4", "[GPT4]")}
    assert 8 in search(conn, "GPT4模型")


def test_prefix_query_matches_longer_word(conn: apsw.Connection) -> None:
    """'refact*' finds 'refactored'; 'refact' alone does not."""
    assert search(conn, "refact*") == {8: ROWS[8].replace("refactored", "[refactored]")}
    assert search(conn, "refact") == {}


def test_snippet_marks_cjk_match(conn: apsw.Connection) -> None:
    """snippet() on the external content brackets exactly the matched CJK characters."""
    match = build_match("全文搜索")
    row = conn.execute(
        "SELECT snippet(messages_fts, 0, '[', ']', '…', 6) FROM messages_fts "
        "WHERE messages_fts MATCH ?",
        (match,),
    ).fetchone()
    assert row is not None
    assert "[全文搜索]" in row[0]


def test_tokenizer_offsets_slice_original_text(db: apsw.Connection) -> None:
    """Every CJK token's byte offsets slice exactly that character out of the input."""
    text = "Écoleの本 使用GPT4模型 한국어 𠀀𠀁 plain"
    utf8 = text.encode("utf-8")
    tokenizer = db.fts5_tokenizer(TOKENIZER_NAME)
    result = tokenizer(utf8, apsw.FTS5_TOKENIZE_DOCUMENT, None, include_colocated=False)
    tokens = cast(list[tuple[int, int, str]], result)
    words = [token for _, _, token in tokens]
    assert words == [
        "ecole", "の", "本", "使", "用", "gpt4", "模", "型", "한", "국", "어", "𠀀", "𠀁", "plain"
    ]  # fmt: skip
    for start, end, token in tokens:
        original = utf8[start:end].decode("utf-8")
        assert original.lower() == token or token == "ecole"


MIXED_TEXT = st.text(
    alphabet=st.sampled_from(list("aZé模型검색テ々𠀀 .-_\u0301\u3000")), max_size=24
)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=40), MIXED_TEXT))
def test_tokenizer_offsets_are_ordered_and_exact(text: str) -> None:
    """For any text, offsets are in bounds and ordered, and each CJK token is its own slice."""
    conn = apsw.Connection("")  # a private temporary file: only the tokenizer is exercised
    register_tokenizer(conn)
    utf8 = text.encode("utf-8", "surrogatepass")
    result = conn.fts5_tokenizer(TOKENIZER_NAME)(utf8, apsw.FTS5_TOKENIZE_DOCUMENT, None)
    previous_end = 0
    for start, end, token, *_ in cast(list[tuple[int, int, str]], result):
        assert previous_end <= start < end <= len(utf8)
        if contains_cjk(token):
            assert utf8[start:end].decode("utf-8") == token
        previous_end = end


def test_query_time_tokenization_matches_document(db: apsw.Connection) -> None:
    """Query and prefix-query tokenization give the same tokens as document tokenization."""
    tok = db.fts5_tokenizer(TOKENIZER_NAME)
    utf8 = "検索エンジン search-engine".encode()
    doc = [t[:3] for t in tok(utf8, apsw.FTS5_TOKENIZE_DOCUMENT, None)]  # less identifiers
    query = list(tok(utf8, apsw.FTS5_TOKENIZE_QUERY, None))
    prefix = list(tok(utf8, apsw.FTS5_TOKENIZE_QUERY | apsw.FTS5_TOKENIZE_PREFIX, None))
    assert doc == query == prefix
    assert len(doc) == 8


def test_contains_cjk_detects_scripts() -> None:
    """contains_cjk is true for Han, kana and hangul and false for Latin or Cyrillic."""
    assert all(contains_cjk(s) for s in ("中", "かな", "カナ", "한"))
    assert not any(contains_cjk(s) for s in ("", "plain", "Café", "Привет"))


def test_other_connection_searches_after_registering(tmp_path: Path) -> None:
    """A second connection that registers the tokenizer searches the same index."""
    make_db(tmp_path / "state.db", ROWS).close()
    other = open_db(tmp_path / "state.db")
    try:
        assert set(search(other, "模型")) == {5, 8}
    finally:
        other.close()


def test_secure_delete_is_enabled(conn: apsw.Connection) -> None:
    """create_fts_sql turns on FTS5 secure-delete in the table's config."""
    rows = conn.execute("SELECT v FROM messages_fts_config WHERE k = 'secure-delete'")
    assert rows.fetchall() == [(1,)]


def test_external_content_delete_removes_tokens(conn: apsw.Connection) -> None:
    """The 'delete' command with old values unindexes a row and erases its tokens."""
    old = ROWS[3]
    with conn:
        conn.execute(
            "INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', ?, ?)",
            (3, old),
        )
        conn.execute("DELETE FROM messages WHERE id = 3")
    assert search(conn, "alice.smith@example.com") == {}
    assert search(conn, "report") == {}
    leaks = conn.execute(
        "SELECT count(*) FROM messages_fts_data WHERE instr(block, 'alice') > 0"
    ).fetchone()
    assert leaks == (0,)
    conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)")
    assert set(search(conn, "模型")) == {5, 8}


def test_delete_of_cjk_row_unindexes_it(conn: apsw.Connection) -> None:
    """Deleting a CJK message with its old content leaves the index consistent."""
    with conn:
        conn.execute(
            "INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', 5, ?)",
            (ROWS[5],),
        )
        conn.execute("DELETE FROM messages WHERE id = 5")
    assert set(search(conn, "模型")) == {8}
    conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)")


def test_create_fts_sql_can_run_twice(conn: apsw.Connection) -> None:
    """Running the creation script again keeps the table and its rows."""
    conn.execute(create_fts_sql())
    assert set(search(conn, "fox")) == {1}


def test_create_fts_sql_uses_given_names(db: apsw.Connection) -> None:
    """Custom table, content and rowid names produce a working index."""
    db.execute("CREATE TABLE notes(nid INTEGER PRIMARY KEY, content TEXT)")
    db.execute(create_fts_sql("notes_idx", "notes", "nid"))
    db.execute("INSERT INTO notes VALUES(7, 'hello 世界')")
    db.execute("INSERT INTO notes_idx(rowid, content) SELECT nid, content FROM notes")
    hits = db.execute("SELECT rowid FROM notes_idx WHERE notes_idx MATCH ?", (build_match("世界"),))
    assert hits.fetchall() == [(7,)]


@pytest.mark.parametrize("bad", ["", "1abc", "messages; DROP", "a-b", "x'y"])
def test_create_fts_sql_rejects_bad_identifiers(bad: str) -> None:
    """A table name that is not a plain identifier raises ValidationError naming it."""
    with pytest.raises(ValidationError, match="invalid FTS table name"):
        create_fts_sql(table=bad)
