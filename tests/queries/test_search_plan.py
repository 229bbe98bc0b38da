"""The bounded plan's FTS5-scored paths equal the window plan (Python bm25) on a seeded corpus."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path

import apsw
import msgspec
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.catalog import connect
from hermes_es.queries import bm25, search_plan
from hermes_es.queries.fts_query import parse_terms
from hermes_es.queries.search import SearchHit, search_messages
from hermes_es.queries.search_plan import exact_pool

_WORDS = [f"w{k}" for k in range(400)]
_WEIGHTS = [1.0 / (k + 2.0) for k in range(400)]
_SOURCES = ("cli", "telegram", "cron", "discord")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[apsw.Connection]:
    """1,200 messages of Zipf-distributed words, identifiers and CJK over four sources."""
    rng = random.Random(20261201)
    home = tmp_path_factory.mktemp("plan")
    with SessionEngine.open(home) as engine:
        for k in range(120):
            sid = engine.start_session(_SOURCES[k % 4], cwd=str(home))
            turn = []
            for j in range(10):
                words = rng.choices(_WORDS, weights=_WEIGHTS, k=rng.randint(3, 40))
                if rng.random() < 0.1:
                    words.insert(0, f"chat-send TKT-{rng.randint(1, 30):03d}")
                if rng.random() < 0.05:
                    words.append("全文搜索")
                turn.append(
                    {"role": "user" if j % 2 == 0 else "assistant", "content": " ".join(words)}
                )
            engine.append_turn(sid, turn)
    conn = connect(home / "state.db")
    yield conn
    conn.close()


_QUERIES = [
    *(f"w{k}" for k in (0, 1, 2, 5, 9, 20, 50, 120, 399)),
    "w0 w1", "w3 w77", "w1 w2 w3", '"w0 w1"', '"w4 w5"', "w1*", "w2 w3*",
    "chat-send", "TKT-007", "全文搜索", "w9 全文搜索", "nothing-matches-this",
]  # fmt: skip


def _same(
    corpus: apsw.Connection, a: list[SearchHit], b: list[SearchHit], query: str, label: str = ""
) -> None:
    """Same hits, order and snippets; same scores as the window plan for one term, and as
    FTS5's ``bm25()`` for several terms (whose idfs the window plan may estimate)."""
    assert [(h.message_id, h.snippet, h.session_id, h.seq) for h in a] == [
        (h.message_id, h.snippet, h.session_id, h.seq) for h in b
    ], label or query
    if len(parse_terms(query)) > 1:
        full = {
            h.message_id: h.score for h in search_messages(corpus, query, limit=5000, plan="full")
        }
        b = [msgspec.structs.replace(h, score=full[h.message_id]) for h in b]
    assert all(math.isclose(x.score, y.score, rel_tol=1e-9) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("window", [2000, 60])
@pytest.mark.parametrize("count_cap", [20_000, 300, 2])
def test_bounded_plan_equals_window_plan(
    corpus: apsw.Connection, monkeypatch: pytest.MonkeyPatch, window: int, count_cap: int
) -> None:
    """Same hits, order, snippets and (to rounding) scores as scoring every window in Python."""
    monkeypatch.setattr(bm25, "COUNT_CAP", count_cap)
    filters: list[dict[str, list[str]]] = [{}, {"sources": ["telegram"]}, {"roles": ["user"]}]
    for query in _QUERIES:
        for limit in (7,):
            for f in filters:
                bounded = search_messages(corpus, query, limit=limit, window=window, **f)
                reference = search_messages(
                    corpus, query, limit=limit, window=window, plan="window", **f
                )
                _same(corpus, bounded, reference, query, f"{query} {limit} {f}")
        hidden = search_messages(corpus, query, window=window, exclude_sources=["cron"])
        assert all(h.source != "cron" for h in hidden)
        _same(
            corpus,
            hidden,
            search_messages(corpus, query, window=window, exclude_sources=["cron"], plan="window"),
            query,
        )


def test_each_fts5_path_is_taken(corpus: apsw.Connection) -> None:
    """The seeded corpus reaches every branch: all matches, newest window, count handed on."""
    first = exact_pool(corpus, parse_terms("w120"), '"w120"', 2000)
    assert first.complete and first.pool
    newest = exact_pool(corpus, parse_terms("w0"), '"w0"', 60)
    assert not newest.complete and newest.pool is not None and len(newest.pool) == 60
    assert exact_pool(corpus, parse_terms("w1*"), '"w1"*', 60).pool is None
    assert exact_pool(corpus, parse_terms("chat-send"), '"chat-send"', 60).pool is None
    several = exact_pool(corpus, parse_terms("w3 w77"), '"w3" AND "w77"', 2000)
    assert several.complete and several.pool


def test_several_rare_terms_score_as_fts5_bm25(corpus: apsw.Connection) -> None:
    """Several terms each with fewer than ``window`` matches: FTS5's exact bm25() scores."""
    for query in ("w3 w77", "w9 全文搜索", "w120 w50", "chat-send w20"):
        terms = parse_terms(query)
        match = " AND ".join(t.to_fts() for t in terms)
        assert exact_pool(corpus, terms, match, 2000).complete, query
        full = {h.message_id: h.score for h in search_messages(corpus, query, plan="full")}
        hits = search_messages(corpus, query)
        assert hits and {h.message_id for h in hits} <= set(full), query
        assert all(math.isclose(h.score, full[h.message_id], rel_tol=1e-9) for h in hits)


def test_a_very_frequent_term_goes_to_the_window_plan(
    corpus: apsw.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a big index (here: more than FULL_COUNT_CAP rows), terms estimated to have more than
    FULL_COUNT_CAP matches together, or each at least SAMPLE, are ranked by the window plan
    (same hits, order and scores as plan=window); a pair with a term under SAMPLE and few
    matches together keeps FTS5's bm25()."""
    monkeypatch.setattr(search_plan, "FULL_COUNT_CAP", 300)
    monkeypatch.setattr(search_plan, "SAMPLE", 40)
    found = exact_pool(corpus, parse_terms("w0 w120"), '"w0" AND "w120"', 2000)
    assert found.pool is None and not found.complete and found.samples is not None
    both = exact_pool(corpus, parse_terms("w50 w77"), '"w50" AND "w77"', 2000)
    assert both.pool is None and both.samples is not None and both.samples.floor is not None
    rare = exact_pool(corpus, parse_terms("w120 w77"), '"w120" AND "w77"', 2000)
    assert rare.complete and rare.pool is not None
    for query in ("w0 w120", "w120 w0", "w1 w9", "w50 w77"):
        bounded = search_messages(corpus, query, limit=7)
        reference = search_messages(corpus, query, limit=7, plan="window")
        assert bounded, query
        assert [(h.message_id, h.snippet) for h in bounded] == [
            (h.message_id, h.snippet) for h in reference
        ]
        assert all(
            math.isclose(x.score, y.score, rel_tol=1e-9)
            for x, y in zip(bounded, reference, strict=True)
        )


def test_the_floor_bounds_the_first_page_only(
    corpus: apsw.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first page of a floored pair reads only rows from the rarest term's newest SAMPLE
    matches up; when they give too few hits the older matches follow, so a large limit finds
    every match."""
    monkeypatch.setattr(search_plan, "FULL_COUNT_CAP", 300)
    monkeypatch.setattr(search_plan, "SAMPLE", 40)
    samples = search_plan.window_samples(corpus, parse_terms("w9 w20"))
    assert samples is not None and samples.floor is not None
    newest = [
        int(r[0])
        for r in corpus.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC"
            " LIMIT 40",
            ('"w20"',),
        )
    ]
    assert samples.floor == newest[-1]  # w20 is the rarer: its newest 40 reach furthest back
    few = search_messages(corpus, "w9 w20", limit=3)
    assert len(few) == 3 and all(h.message_id >= samples.floor for h in few)
    every = search_messages(corpus, "w9 w20", limit=5000)
    full = search_messages(corpus, "w9 w20", limit=5000, plan="full")
    assert sorted(h.message_id for h in every) == sorted(h.message_id for h in full)
    assert any(h.message_id < samples.floor for h in every)


def test_a_bounded_first_page_read_forwards_is_the_backward_page(
    corpus: apsw.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first page the samples bound to at most its size (a term with fewer matches, or the
    floor's span) is read oldest first: the same rows and scores as the newest-first read."""
    monkeypatch.setattr(search_plan, "FULL_COUNT_CAP", 300)
    monkeypatch.setattr(search_plan, "SAMPLE", 40)
    for query in ("w9 w20", "w0 w120", "w50 w77", "w1 w2 w3", '"w0 w1"', "chat-send w1"):
        terms = parse_terms(query)
        samples = search_plan.window_samples(corpus, terms)
        assert samples is not None, query
        forwards = bm25.Candidates(corpus, query, terms, None, samples)
        assert forwards._bounded_by(40), query
        got = forwards.page(None, 40)
        with monkeypatch.context() as m:
            m.setattr(bm25.Candidates, "_bounded_by", lambda self, size: False)
            backwards = bm25.Candidates(corpus, query, terms, None, samples)
            expected = backwards.page(None, 40)
        assert got and sorted(got) == sorted(expected), query
        assert forwards.idfs == backwards.idfs, query
    assert not bm25.Candidates(corpus, "w0 w1", None, None, samples)._bounded_by(39)


def test_top_candidates_are_the_best_of_the_pool(corpus: apsw.Connection) -> None:
    """``top`` keeps the best candidates in the same order as the whole pool, and says so."""
    for query, window in (("w120", 2000), ("w0", 60), ("w3 w77", 2000)):
        terms = parse_terms(query)
        match = " AND ".join(t.to_fts() for t in terms)
        whole = exact_pool(corpus, terms, match, window)
        best = exact_pool(corpus, terms, match, window, top=5)
        assert whole.pool and best.pool == whole.pool[:5], query
        assert best.truncated == (len(whole.pool) >= 5) and not whole.truncated
        assert best.complete == whole.complete


def test_indexed_rows_reads_the_row_count(corpus: apsw.Connection) -> None:
    """The row count read from FTS5's averages record equals a count of the indexed rows."""
    (rows,) = corpus.execute("SELECT count(*) FROM messages_fts_docsize").fetchone()
    assert search_plan.indexed_rows(corpus) == rows == 1200


def test_frequent_word_reuses_the_count(
    corpus: apsw.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A word with at least COUNT_CAP matches is counted once and handed to the window plan."""
    monkeypatch.setattr(bm25, "COUNT_CAP", 50)
    found = exact_pool(corpus, parse_terms("w0"), '"w0"', 40)
    assert found.pool is None and found.counted is not None and found.counted[0] == 50


def test_plan_names(tmp_path: Path) -> None:
    """An unknown plan is refused with its name."""
    with SessionEngine.open(tmp_path) as engine:
        sid = engine.start_session("cli", cwd=str(tmp_path))
        engine.append_message(sid, "user", "hello")
    conn = connect(tmp_path / "state.db")
    try:
        with pytest.raises(ValueError, match="unknown search plan 'fast'"):
            search_messages(conn, "hello", plan="fast")
    finally:
        conn.close()


def test_the_window_plan_registers_its_function_once(corpus: apsw.Connection) -> None:
    """Searches on one connection share one ``hermes_frequencies`` registration (FTS5 keeps
    every registration until the connection closes), and still score each query alone."""
    first = bm25.Candidates(corpus, "w1 w9")
    second = bm25.Candidates(corpus, "w0")
    assert first.freq is second.freq
    pages = [first.page(None, 60), second.page(None, 60), first.page(None, 60)]
    assert pages[0] == pages[2] and pages[0] != pages[1]
    alone = bm25.Candidates(corpus, "w1 w9").page(None, 60)
    assert pages[0] == alone


def test_a_phrase_is_floored_by_its_rarest_word(
    corpus: apsw.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a big index one phrase's first page reads only rows from its rarest word's newest
    SAMPLE matches up, the next page a span of row ids 8 times as wide; the bounded plan equals
    the window plan, and a large limit still finds every match of the phrase."""
    monkeypatch.setattr(search_plan, "FULL_COUNT_CAP", 300)
    monkeypatch.setattr(search_plan, "SAMPLE", 40)
    samples = search_plan.window_samples(corpus, parse_terms('"w4 w5"'))
    assert samples is not None and samples.floor is not None
    newest = {
        w: [
            int(r[0])
            for r in corpus.execute(
                "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC",
                (f'"{w}"',),
            )
        ]
        for w in ("w4", "w5")
    }
    rarer = min(newest.values(), key=lambda rows: rows[39])  # its newest 40 reach furthest
    assert samples.floor == rarer[39]
    width = samples.high - samples.floor + 1
    assert samples.next_floor(samples.floor, 1) == max(samples.low, samples.floor - 8 * width)
    assert samples.next_floor(samples.floor, 30) == samples.low
    for query in ('"w4 w5"', '"w0 w1"', '"w1 w2"'):
        bounded = search_messages(corpus, query, limit=7)
        reference = search_messages(corpus, query, limit=7, plan="window")
        assert bounded, query
        assert [(h.message_id, h.snippet, h.score) for h in bounded] == [
            (h.message_id, h.snippet, h.score) for h in reference
        ]
        every = search_messages(corpus, query, limit=5000)
        full = search_messages(corpus, query, limit=5000, plan="full")
        assert sorted(h.message_id for h in every) == sorted(h.message_id for h in full)
