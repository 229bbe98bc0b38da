"""Pair lexemes: phrases found through the postings of their adjacent token pairs, the same
matches as checking positions, and the in-place upgrade of layout-2 stores."""

from __future__ import annotations

import random

import psycopg
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.catalog import SCHEMA_VERSION
from hermes_es.store.postgres.schema import layout
from hermes_es.store.postgres.tokens import (
    INCOMPLETE,
    MAX_POSITION,
    PAIR_MAX_CHARS,
    match_query,
    tsquery_text,
    tsvector_literal,
)
from tests.postgres.search_reference import assert_reindexed_in_place, message_row_places

WORDS = ["the", "of", "to", "chat", "send", "alpha", "beta", "東", "京", "p2", "2", "x"]

STRIP_PAIRS = (
    "ts_delete(tsv, ARRAY(SELECT lexeme FROM unnest(tsv) WHERE left(lexeme, 1) = '\u00a7'))"
)
"""A tsvector without its pair lexemes (what layout 2 stored; its prefix lexemes go too)."""


def test_tsvector_holds_the_pairs_of_adjacent_tokens(pg_url: str) -> None:
    """Each pair of adjacent tokens is a lexeme ``§a b``; a short message has no marker."""
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT array(SELECT lexeme FROM unnest(%s::tsvector) ORDER BY 1)",
            (tsvector_literal("run chat-send, then 東京 it's"),),
        ).fetchone()
    assert row is not None
    lexemes = set(row[0])
    assert {"§run chat", "§chat send", "§send then", "§then 東", "§東 京", "§京 it"} <= lexemes
    assert {"run", "chat", "send", "東", "it", "s"} <= lexemes
    assert INCOMPLETE not in lexemes
    assert {lexeme for lexeme in lexemes if lexeme.startswith("§<")} == {
        "§<run",
        "§<cha",
        "§<sen",
        "§<the",
    }


def test_missing_pairs_are_marked(pg_url: str) -> None:
    """A message with pairs past the last position or too long holds the ``§`` marker."""
    long_pair = "a" * PAIR_MAX_CHARS + " b"
    many = " ".join(["w"] * (MAX_POSITION + 5))
    with psycopg.connect(pg_url) as conn:
        for text, marked in ((long_pair, True), (many, True), ("plain words here", False)):
            row = conn.execute(
                "SELECT %s::tsvector @@ %s::tsquery", (tsvector_literal(text), f"'{INCOMPLETE}'")
            ).fetchone()
            assert row is not None and row[0] is marked, text[:20]


def _corpus() -> list[str]:
    rng = random.Random(5)
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(1, 12))) for _ in range(400)]
    texts.append("a" * (PAIR_MAX_CHARS - 1) + " chat send")  # a pair too long, then a pair
    texts.append("the " * (MAX_POSITION + 3) + "chat send alpha")  # past the last position
    texts.append("chat-send P2.2 東、京 the of to")
    texts.append("x" * 3000 + " send")  # a token longer than PostgreSQL's longest lexeme
    return texts


def _queries() -> list[str]:
    rng = random.Random(9)
    found = ["chat-send", "P2.2", "東京", '"the of"', '"chat se"*', '"of th"*', "the", "be*"]
    found += ["alp*", "cha*", "sen*", "xxx*", "alph*", "bet* the"]  # prefix lexemes, and not
    found += ['"' + " ".join(rng.choices(WORDS, k=rng.randint(2, 4))) + '"' for _ in range(60)]
    found += ["a" * (PAIR_MAX_CHARS - 1) + " chat", "x" * 3000 + "-send", "x" * 3000]
    return found


def test_pairs_match_what_positions_match(pg_url: str) -> None:
    """For words, phrases, identifiers, prefixes and CJK, ``match_query`` over tsvectors with
    pairs finds exactly the rows the phrase of tokens finds over positions alone."""
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE t (id INT PRIMARY KEY, tsv TSVECTOR)")
        with conn.cursor().copy("COPY t (id, tsv) FROM STDIN") as copy:
            for i, text in enumerate(_corpus()):
                copy.write_row((i, tsvector_literal(text)))
        hits = 0
        for query in _queries():
            match, rank = match_query(query), tsquery_text(query)
            assert match is not None and rank is not None
            by_pairs = conn.execute(
                "SELECT array(SELECT id FROM t WHERE tsv @@ %s::tsquery ORDER BY id)", (match,)
            ).fetchone()
            by_positions = conn.execute(
                f"SELECT array(SELECT id FROM t WHERE {STRIP_PAIRS} @@ %s::tsquery ORDER BY id)",
                (rank,),
            ).fetchone()
            assert by_pairs == by_positions, query
            hits += len(by_pairs[0]) if by_pairs else 0
        assert hits > 400  # the queries do match (the comparison is not between empty sets)


@pytest.mark.parametrize("shared", [SCHEMA_VERSION, 9])
def test_layout_2_store_is_reindexed_in_place(pg_url: str, shared: int) -> None:
    """Opening a store of PostgreSQL layout 2 (tsvectors without pairs; shared layout 9 or the
    current one) rewrites its search index in place, without replaying the log: the phrase is
    found through its pair again."""
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", cwd="")
        for text in ("please run chat-send now", "send chat", "the of the", "nothing"):
            eng.append_message(sid, "user", text)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"UPDATE messages_fts SET tsv = {STRIP_PAIRS}")
        conn.execute(
            "UPDATE hermes_meta SET value = %s WHERE key = 'schema_version'",
            (f"{shared}.2",),
        )
        rows_before = message_row_places(conn)
    with SessionEngine.open(pg_url, actor="test") as eng:
        assert [h.seq for h in eng.search("chat-send")] == [0]
        assert [h.seq for h in eng.search('"the of"')] == [2]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        pairs = conn.execute(
            "SELECT count(*) FROM messages_fts WHERE tsv @@ %s::tsquery", ("'§chat send'",)
        ).fetchone()
        assert pairs == (1,)
        assert_reindexed_in_place(conn, rows_before)


def test_search_statements_are_never_prepared(pg_url: str) -> None:
    """A search repeated many times is planned for its terms every time: its statements are
    never prepared (psycopg prepares a statement run five times, and the server may then use
    one generic plan for every term, walking the whole index for a rare one)."""
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", cwd="")
        for text in ("chat-send once", "the of the", "plain words"):
            eng.append_message(sid, "user", text)
        conn = eng.store.connection()
        for _ in range(12):
            for query in ("chat-send", "plain", "th*", '"the of"'):
                assert eng.search(query)
        prepared = conn.execute_pg(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%%messages_fts%%'"
        ).fetchall()
        assert prepared == [(0,)]


def test_a_token_longer_than_a_lexeme_is_appended_and_found(pg_url: str) -> None:
    """A token over PostgreSQL's longest lexeme (2,046 bytes) is cut, not refused: the
    message is stored and found by that token and by a phrase ending in it."""
    blob = "q" * 3000
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", cwd="")
        eng.append_message(sid, "user", f"dump {blob} end")
        eng.append_message(sid, "user", "dump end")
        assert [h.seq for h in eng.search(blob)] == [0]
        assert [h.seq for h in eng.search(f'"dump {blob}"')] == [0]


def test_shared_layout_9_store_opens_without_replay(pg_url: str) -> None:
    """A store of shared layout 9 with the current PostgreSQL layout (10 changed SQLite's
    indexes only) is relabelled when opened: no table is rewritten, nothing replayed."""
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", cwd="")
        eng.append_message(sid, "user", "please run chat-send now")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE hermes_meta SET value = %s WHERE key = 'schema_version'",
            ("9." + layout().split(".")[1],),
        )
        before = conn.execute(
            "SELECT (SELECT array_agg(ctid::text) FROM messages),"
            " (SELECT array_agg(ctid::text) FROM messages_fts)"
        ).fetchone()
    with SessionEngine.open(pg_url, actor="test") as eng:
        assert [h.seq for h in eng.search("chat-send")] == [0]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        after = conn.execute(
            "SELECT (SELECT array_agg(ctid::text) FROM messages),"
            " (SELECT array_agg(ctid::text) FROM messages_fts)"
        ).fetchone()
        version = conn.execute(
            "SELECT value FROM hermes_meta WHERE key = 'schema_version'"
        ).fetchone()
    assert after == before
    assert version == (layout(),)
