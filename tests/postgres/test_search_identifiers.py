"""Identifier lexemes: every tsvector holds the identifier tokens the ``hermes`` tokenizer
colocates (as the FTS5 index does), an identifier term is a prefix of them answered by the GIN
index, and a store of layout 4 gets them by re-indexing its message texts in place."""

from __future__ import annotations

import psycopg
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.projections import catalog
from hermes_es.store.postgres import search
from hermes_es.store.postgres.schema import layout
from hermes_es.store.postgres.search import Query, row_tsvector
from hermes_es.store.postgres.tokens import match_query, tsquery_text, tsvector_literal
from tests.identifier_corpus import IDENTIFIER_TEXTS
from tests.postgres.search_reference import assert_reindexed_in_place, message_row_places

STRIP_IDENTIFIERS = (
    "ts_delete(tsv, ARRAY(SELECT lexeme FROM unnest(tsv) WHERE left(lexeme, 1) = E'\\x1f'))"
)
"""A tsvector without its identifier lexemes (what layout 4 stored)."""

TEXTS = IDENTIFIER_TEXTS


def test_identifier_lexemes_sit_at_their_tokens_positions(pg_url: str) -> None:
    """``src/main.py`` holds ``\\x1fsrc/main.py`` at the position of ``src`` and
    ``\\x1fmain.py`` at that of ``main``; no prefix or pair lexeme is made from them, and a
    quote in a run is escaped."""
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT array(SELECT lexeme || coalesce(':' || array_to_string(positions, ','), '')"
            " FROM unnest(%s::tsvector) ORDER BY 1)",
            (tsvector_literal("open src/main.py, don't"),),
        ).fetchone()
    assert row is not None
    lexemes = set(row[0])
    assert {"\x1fsrc/main.py:2", "\x1fmain.py:3", "\x1fdon't:5", "src:2", "main:3"} <= lexemes
    assert not [x for x in lexemes if x.startswith(("\u00a7<\x1f", "\u00a7\x1f"))]
    assert not [x for x in lexemes if x.startswith("\u00a7") and "\x1f" in x]


def test_an_identifier_term_is_a_prefix_of_the_identifier_lexemes() -> None:
    """A bare identifier is ``'\\x1f…':*`` in both the matching and the ranking query; a
    quoted one and one of more than 48 characters stay phrases; a word stays a word."""
    assert match_query("fenlocalex_4") == "'\x1ffenlocalex_4':*"
    assert tsquery_text("src/main.py") == "'\x1fsrc/main.py':*"
    quoted = match_query('"fenlocalex_4"') or ""
    assert "'fenlocalex' <-> '4'" in quoted and "\x1f" not in quoted
    long = "_".join(["alpha"] * 9)  # 53 characters
    assert "\x1f" not in (match_query(long) or "")
    assert match_query("word") == "'word'"


def test_the_gin_index_answers_an_identifier_query(pg_url: str) -> None:
    """The planner reads a rare identifier's matches from the GIN index (a bitmap of its
    prefix), not by scanning the table, and they are the rows holding it."""
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE messages_fts (id BIGINT PRIMARY KEY, tsv TSVECTOR NOT NULL)")
        with conn.cursor().copy("COPY messages_fts (id, tsv) FROM STDIN") as copy:
            for i in range(4000):
                text = f"row {i} words and more words"
                if i % 1000 == 7:
                    text += " fenlocalex_44364" if i < 2000 else " fenlocalex_4"
                copy.write_row((i << 12, row_tsvector(i << 12, text)))
        for statement in search.PgSearchProjector().indexes():
            conn.execute(statement)
        conn.execute("ANALYZE messages_fts")
        q = Query.of("fenlocalex_4")
        assert q is not None
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN SELECT id FROM messages_fts WHERE tsv @@ %s::tsquery", (q.match,)
            ).fetchall()
        )
        assert "Bitmap Index Scan on messages_fts_tsv" in plan, plan
        assert "Seq Scan" not in plan, plan
        found = conn.execute(
            "SELECT array(SELECT id >> 12 FROM messages_fts WHERE tsv @@ %s::tsquery ORDER BY 1)",
            (q.match,),
        ).fetchone()
        assert found == ([7, 1007, 2007, 3007],)


def test_layout_4_store_is_reindexed_with_identifiers(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Opening a store of PostgreSQL layout 4 (tsvectors without identifier lexemes) rewrites
    every row of the search index from its message text, in batches and without replaying
    the log: each row then holds what a new row holds, identifier terms match as on SQLite,
    the indexes are there again, and a big store reports its progress on stderr."""
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", cwd="")
        for text in TEXTS:
            eng.append_message(sid, "user", text)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        written = conn.execute("SELECT id, tsv::text FROM messages_fts ORDER BY id").fetchall()
        conn.execute(f"UPDATE messages_fts SET tsv = {STRIP_IDENTIFIERS}")
        stripped = conn.execute("SELECT id, tsv::text FROM messages_fts ORDER BY id").fetchall()
        assert stripped != written
        conn.execute(
            "UPDATE hermes_meta SET value = %s WHERE key = 'schema_version'",
            (layout().split(".")[0] + ".4",),
        )
        rows_before = message_row_places(conn)
    monkeypatch.setattr(catalog, "UPGRADE_PROGRESS_MIN", 1)
    monkeypatch.setattr(search, "REINDEX_BATCH", 4)
    capfd.readouterr()
    with SessionEngine.open(pg_url, actor="test") as eng:
        err = capfd.readouterr().err
        assert "PostgreSQL layout 5" in err
        assert "6 of 6 messages" in err
        assert sorted(h.seq for h in eng.search("fenlocalex_4")) == [0, 1]
        assert sorted(h.seq for h in eng.search("TKT-001")) == [4]
        assert sorted(h.seq for h in eng.search('"fenlocalex_4"')) == [1, 2, 5]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT id, tsv::text FROM messages_fts ORDER BY id").fetchall() == (
            written
        )
        assert_reindexed_in_place(conn, rows_before)


def test_identifier_snippets_mark_its_words(pg_url: str) -> None:
    """A hit of ``fenlocalex_4`` inside ``fenlocalex_44364`` marks its words, the last one as
    a prefix, as on SQLite."""
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", cwd="")
        eng.append_message(sid, "user", TEXTS[0])
        (hit,) = eng.search("fenlocalex_4")
    assert "\x02fenlocalex\x03_\x0244364\x03" in hit.snippet
