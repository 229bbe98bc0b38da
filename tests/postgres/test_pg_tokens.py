"""The PostgreSQL backend's tokens are exactly the ones SQLite's FTS5 index gets."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from hermes_es.projections.fts import TOKENIZER_NAME, register_tokenizer
from hermes_es.store.postgres.tokens import tokens, tsvector_literal

TEXTS = [
    "a typical chat message of about three hundred bytes",
    "chat-send P2.2 foo@example.com https://example.com/a?b=c snake_case_name CamelCase123",
    "Café naïve façade ÅNGSTRÖM straße",
    "日本語のテキスト mixed with English",
    "한국어 문장입니다 and 中文字符 in one line",
    "it's a 'quoted' \\back\\slash",
    "",
]


@pytest.mark.parametrize("text", TEXTS)
def test_tokens_equal_fts5s(text: str, tmp_path: Path) -> None:
    """Document and query tokens equal what the registered ``hermes`` tokenizer hands FTS5,
    and the tsvector literal lists each token with its 1-based positions."""
    conn = apsw.Connection(str(tmp_path / "tokens.db"))
    register_tokenizer(conn)
    fts5 = conn.fts5_tokenizer(TOKENIZER_NAME, [])
    for flags, query in ((apsw.FTS5_TOKENIZE_DOCUMENT, False), (apsw.FTS5_TOKENIZE_QUERY, True)):
        expected = [str(t[2]) for t in fts5(text.encode("utf-8"), flags, None)]
        assert tokens(text, query=query) == expected
    document = tokens(text)
    literal = tsvector_literal(text)
    for token in set(document):
        positions = [str(i + 1) for i, t in enumerate(document) if t == token]
        quoted = "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"
        assert f"{quoted}:{','.join(positions)}" in literal.split(" ")
    conn.close()
