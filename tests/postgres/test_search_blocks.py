"""Id-block lexemes: every row's tsvector names its id blocks, a range's blocks select exactly
its rows through the GIN index, and a store of layout 3 gets them (and the prefix lexemes)
added in place."""

from __future__ import annotations

import itertools

import psycopg
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.store.postgres import id_blocks
from hermes_es.store.postgres.schema import layout
from hermes_es.store.postgres.search import row_tsvector
from tests.postgres.search_reference import assert_reindexed_in_place, message_row_places

STRIP_BLOCKS = (
    "ts_delete(tsv, ARRAY(SELECT lexeme FROM unnest(tsv)"
    " WHERE left(lexeme, 2) IN ('\u00a7 ', '\u00a7<')))"
)
"""A tsvector without its id-block and prefix lexemes (what layout 3 stored)."""


@pytest.mark.parametrize(
    ("lo", "hi"),
    [(0, 0), (5, 5), (0, 1 << 22), (3 << 22, (7 << 26) + 5), (12_345_678, 98_765_432_100)],
)
def test_a_cover_is_the_blocks_of_the_range_and_no_more(lo: int, hi: int) -> None:
    """The blocks of a cover are contiguous, start at or below ``lo`` on a block boundary,
    end on the finest block holding ``hi``, never reach below a quarter of the range under
    ``lo``, and are few."""
    query, start = id_blocks.cover(lo, hi)
    sizes = [1 << s for s in id_blocks.BLOCK_SHIFTS]
    spans = []
    for part in query.split(" | "):
        level, block = part.strip("'")[len(id_blocks.MARK) :].split(".")
        size = sizes[int(level)]
        spans.append((int(block) * size, int(block) * size + size))
    spans.sort()
    assert spans[0][0] == start <= lo
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert spans[-1][0] <= hi < spans[-1][1] and spans[-1][1] - spans[-1][0] == sizes[0]
    assert lo - start < max(sizes[0], (hi - lo + 1) // 4 + 1)
    assert len(spans) <= 2 * 16 * (len(sizes) - 1) + (hi - lo) // sizes[-1] + 2


def test_blocks_select_the_rows_of_a_range(pg_url: str) -> None:
    """A word ANDed (as a second condition on the GIN index) with the blocks covering an id
    range finds exactly the word's rows in the blocks, whichever level covers them."""
    ids = [i * 997 << 12 for i in range(3000)]  # positions 0, 997, ... : blocks of every level
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, tsv TSVECTOR NOT NULL)")
        with conn.cursor().copy("COPY t (id, tsv) FROM STDIN") as copy:
            for n, mid in enumerate(ids):
                copy.write_row((mid, row_tsvector(mid, "word" if n % 3 == 0 else "other")))
        conn.execute("CREATE INDEX ON t USING gin (tsv)")
        conn.execute("SET enable_seqscan = off")
        for lo, hi in ((ids[100], ids[2500]), (ids[7], ids[9]), (0, ids[-1]), (ids[-1], ids[-1])):
            blocks, start = id_blocks.cover(lo, hi)
            got = conn.execute(
                "SELECT array(SELECT id FROM t WHERE tsv @@ 'word' AND tsv @@ %s::tsquery"
                " AND id <= %s ORDER BY id)",
                (blocks, hi),
            ).fetchone()
            want = [m for n, m in enumerate(ids) if n % 3 == 0 and start <= m <= hi]
            assert got == (want,)
            assert want or lo == hi


def test_layout_3_store_gets_its_blocks_in_place(pg_url: str) -> None:
    """Opening a store of PostgreSQL layout 3 (tsvectors without id blocks and prefixes) adds
    the block and prefix lexemes to every row of the search index in the server, without
    replaying the log: each row then holds what a new row holds, the indexes are there again
    and search finds the same messages."""
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", cwd="")
        for text in ("please run chat-send now", "send chat", "the of the", "nothing"):
            eng.append_message(sid, "user", text)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        written = conn.execute("SELECT id, tsv::text FROM messages_fts ORDER BY id").fetchall()
        conn.execute(f"UPDATE messages_fts SET tsv = {STRIP_BLOCKS}")
        conn.execute(
            "UPDATE hermes_meta SET value = %s WHERE key = 'schema_version'",
            (layout().split(".")[0] + ".3",),
        )
        rows_before = message_row_places(conn)
        stripped = conn.execute("SELECT id, tsv::text FROM messages_fts ORDER BY id").fetchall()
    with SessionEngine.open(pg_url, actor="test") as eng:
        assert [h.seq for h in eng.search("chat-send")] == [0]
        assert [h.seq for h in eng.search('"the of"')] == [2]
        assert sorted(h.seq for h in eng.search("sen*")) == [0, 1]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT id, tsv::text FROM messages_fts ORDER BY id").fetchall() == (
            written
        )
        for mid, _ in stripped:
            row = conn.execute(
                "SELECT array(SELECT lexeme FROM unnest(tsv) WHERE left(lexeme, 2) = %s"
                " ORDER BY 1) FROM messages_fts WHERE id = %s",
                (id_blocks.MARK, mid),
            ).fetchone()
            assert row == (sorted(id_blocks.lexemes(mid)),)
        same = conn.execute(
            f"SELECT id, ({STRIP_BLOCKS})::text FROM messages_fts ORDER BY id"
        ).fetchall()
        assert same == stripped
        assert_reindexed_in_place(conn, rows_before)


def test_new_rows_hold_their_blocks(pg_url: str) -> None:
    """Every message row written by the engine holds the block lexemes of its id."""
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", cwd="")
        eng.append_message(sid, "user", "hello there")
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT id, array(SELECT lexeme FROM unnest(tsv) WHERE left(lexeme, 2) = %s"
            " ORDER BY 1) FROM messages_fts",
            (id_blocks.MARK,),
        ).fetchall()
    assert rows and all(got == sorted(id_blocks.lexemes(mid)) for mid, got in rows)
