"""Search: bounded-window plan equals plain bm25 where it should, context, grouping, fuzzing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_es.commands.engine import SessionEngine
from hermes_es.queries.search import SearchHit, group_by_chain, search_grouped, search_messages


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionEngine]:
    eng = SessionEngine.open(tmp_path_factory.mktemp("search") / "state.db")
    a = eng.start_session("cli", cwd="/tmp/x", title="deploys")
    eng.append_turn(
        a,
        [
            {"role": "user", "content": "how do I deploy the payments service?"},
            {"role": "assistant", "content": "run deploy.sh with retry; see chat-send docs"},
            {"role": "user", "content": "thanks, 我们使用模型 works"},
        ],
    )
    b = eng.continue_session(a, [{"role": "user", "content": "summary: deploy payments"}])
    eng.append_message(b, "assistant", "deploy succeeded")
    cron = eng.start_session("cron", cwd="/tmp/x")
    eng.append_message(cron, "assistant", "nightly deploy report")
    for i in range(60):
        s = eng.start_session("cli", cwd="/tmp/y")
        eng.append_message(s, "user", f"common filler word number {i} deploy" * (1 + i % 3))
    yield eng
    eng.close()


def test_bounded_plan_equals_full_when_window_covers_all(engine: SessionEngine) -> None:
    """With fewer matches than the window, the bounded plan ranks every match like plain bm25."""
    conn = engine.store.connection()
    full = search_messages(conn, "deploy", limit=100, plan="full")
    bounded = search_messages(conn, "deploy", limit=100)
    assert [(h.session_id, h.seq) for h in bounded] == [(h.session_id, h.seq) for h in full]
    assert len(full) == 65


def test_small_window_ranks_recent_matches_and_widens_for_filters(engine: SessionEngine) -> None:
    """A tiny window ranks only recent matches, and widens until filters yield enough hits."""
    conn = engine.store.connection()
    recent = search_messages(conn, "deploy", limit=5, window=5)
    assert len(recent) == 5 and all(h.title == "" for h in recent)
    cron = search_messages(conn, "deploy", limit=1, window=2, sources=["cron"])
    assert [h.source for h in cron] == ["cron"]


def test_rare_term_keeps_full_recall(engine: SessionEngine) -> None:
    """An identifier and a CJK phrase are found whatever the window."""
    conn = engine.store.connection()
    assert [h.seq for h in search_messages(conn, "chat-send", window=1)] == [1]
    assert [h.seq for h in search_messages(conn, "模型", window=1)] == [2]
    assert search_messages(conn, "depl*", limit=3, window=1)


def test_grouped_by_chain_with_context_and_no_automation(engine: SessionEngine) -> None:
    """Hits of one compressed conversation form one group; cron is out unless named."""
    conn = engine.store.connection()
    groups = search_grouped(conn, "payments")
    assert len(groups) == 1 and groups[0].title == "deploys #2"
    assert len(groups[0].results) == 2
    by_seq = {(r.hit.session_id, r.hit.seq): r for r in groups[0].results}
    root_hit = by_seq[(groups[0].root_id, 0)]
    assert root_hit.before is None and root_hit.after is not None
    assert root_hit.after.text.startswith("run deploy.sh")
    assert all(g.source != "cron" for g in search_grouped(conn, "nightly"))
    assert [g.source for g in search_grouped(conn, "nightly", sources=["cron"])] == ["cron"]
    assert group_by_chain(conn, []) == []


def test_role_filter(engine: SessionEngine) -> None:
    """--role limits hits to that role."""
    conn = engine.store.connection()
    hits = search_messages(conn, "deploy", roles=["assistant"], limit=50)
    assert hits and {h.role for h in hits} == {"assistant"}


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(max_size=40) | st.text(alphabet='"*-()^:NEARORAND{} \t+', max_size=30))
def test_any_input_is_safe(engine: SessionEngine, query: str) -> None:
    """No string makes search raise (quotes, NEAR(, *, -, parentheses, control characters)."""
    conn = engine.store.connection()
    search_messages(conn, query, limit=3)
    search_messages(conn, query, limit=3, plan="full")
    search_grouped(conn, query, limit=3)


def test_snippet_marks_query_tokens(engine: SessionEngine) -> None:
    """Snippets wrap exact, prefix and adjacent CJK matches in one marker pair each."""
    conn = engine.store.connection()
    (hit,) = search_messages(conn, "模型")
    assert "\x02模型\x03" in hit.snippet
    (hit,) = search_messages(conn, "payments deplo*", roles=["user"], sources=["cli"], limit=1)
    assert "\x02deploy\x03" in hit.snippet and "\x02payments\x03" in hit.snippet


@pytest.fixture(scope="module")
def words(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionEngine]:
    eng = SessionEngine.open(tmp_path_factory.mktemp("words") / "state.db")
    for i in range(40):
        s = eng.start_session("cli", cwd="/tmp/w")
        texts = ["tea teåm time", "t", "tø cake", "toast and tea", "the t3 stack", "nothing here"]
        text = texts[i % 6]
        eng.append_message(s, "user", f"{text} plus word{i % 7} " + "pad " * (i % 5))
    yield eng
    eng.close()


def _ranked(hits: list[SearchHit]) -> list[tuple[int, float]]:
    return [(h.message_id, h.score) for h in hits]


@pytest.fixture(params=["native", "expanded"])
def prefix_plan(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Short prefixes matched by FTS5 itself (an index of few rows) or expanded into the
    indexed three-character prefixes (as on an index of more than ``NATIVE_PREFIX_ROWS``)."""
    from hermes_es.queries import bm25

    if request.param == "expanded":
        monkeypatch.setattr(bm25, "NATIVE_PREFIX_ROWS", 0)
    return str(request.param)


def test_one_letter_prefix_equals_plain_bm25(words: SessionEngine, prefix_plan: str) -> None:
    """``t*`` (merged by FTS5: no one-character prefix index) finds and scores rows as bm25
    does."""
    conn = words.store.connection()
    full = search_messages(conn, "t*", limit=100, plan="full")
    assert len(full) == 34  # every message but the six "nothing here" ones
    assert any("\x02tø\x03" in h.snippet for h in search_messages(conn, "t*", limit=100))
    assert _ranked(search_messages(conn, "t*", limit=100)) == _ranked(full)
    assert _ranked(search_messages(conn, "word3 t*", limit=100)) == _ranked(
        search_messages(conn, "word3 t*", limit=100, plan="full")
    )


def test_one_letter_prefix_reads_the_prefix_index(
    words: SessionEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an index of more than ``NATIVE_PREFIX_ROWS`` rows ``t*`` is planned as ``"t"``, its
    two-character words and every indexed three-character prefix under it (plus the non-ASCII
    stems: ``tø``), not as FTS5's merge of every word; on a smaller one as FTS5's merge."""
    from hermes_es.queries import bm25
    from hermes_es.queries.bm25 import _plan_terms
    from hermes_es.queries.fts_query import parse_terms

    conn = words.store.connection()
    for query in ("t*", "te*"):
        (native,) = _plan_terms(conn, parse_terms(query))
        assert native.phrases == [f'"{query[:-1]}"*'] and native.single_token
    monkeypatch.setattr(bm25, "NATIVE_PREFIX_ROWS", 39)  # the index holds 40 rows
    (term,) = _plan_terms(conn, parse_terms("t*"))
    assert term.single_token
    assert term.phrases[:2] == ['"t"', '"tø"*']
    assert '"te"' in term.phrases and '"tea"*' in term.phrases and '"t3"' in term.phrases
    assert len(term.phrases) == 2 + 36 * 37


def test_two_letter_prefix_equals_plain_bm25(words: SessionEngine, prefix_plan: str) -> None:
    """``te*`` (the word ``te`` plus the indexed three-character prefixes, non-ASCII ones
    included) finds and scores rows as bm25 does."""
    conn = words.store.connection()
    for query in ("te*", "th*", "to*", "word3 te*"):
        full = search_messages(conn, query, limit=100, plan="full")
        assert full, query
        assert _ranked(search_messages(conn, query, limit=100)) == _ranked(full), query
    hits = search_messages(conn, "te*", limit=100)
    assert any("\x02teåm\x03" in h.snippet for h in hits)
    assert len(hits) == 14  # the "tea teåm time" and "toast and tea" rows


def test_estimated_idf_keeps_order_of_one_term(words: SessionEngine) -> None:
    """Above the window a term's idf is estimated: same rows, same order, scores nearly equal."""
    conn = words.store.connection()
    full = search_messages(conn, "plus", limit=200, plan="full")
    small = search_messages(conn, "plus", limit=200, window=4)
    assert len(small) == len(full) == 40
    assert sorted(h.message_id for h in small) == sorted(h.message_id for h in full)
    by_id = {h.message_id: h.score for h in full}
    assert all(
        abs(h.score - by_id[h.message_id]) <= 0.05 * abs(by_id[h.message_id]) + 1e-5 for h in small
    )


def test_estimated_counts_keep_hits_and_one_term_order(
    words: SessionEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With tiny count caps every idf is estimated: same hits; one term keeps bm25's order."""
    import hermes_es.queries.bm25 as bm25

    monkeypatch.setattr(bm25, "COUNT_CAP", 3)
    monkeypatch.setattr(bm25, "SPAN_CAP", 5)
    conn = words.store.connection()
    for query in ("plus", "tea", "word3 pad", '"plus word1"', "te*", "to*", "t*"):
        full = search_messages(conn, query, limit=200, plan="full")
        approx = search_messages(conn, query, limit=200, window=4)
        assert sorted(h.message_id for h in approx) == sorted(h.message_id for h in full), query
        assert all(h.score < 0 for h in approx)
        if " " not in query:
            by_id = {h.message_id: h.score for h in full}
            exact = [by_id[h.message_id] for h in approx]
            assert exact == sorted(exact), query


def test_one_letter_prefix_on_a_query_only_connection(words: SessionEngine) -> None:
    """Where no temp table may be made (query_only), ``t*`` still finds what bm25 finds."""
    from hermes_es.projections.catalog import connect

    conn = connect(words.store.path, readonly=True)
    try:
        conn.execute("PRAGMA query_only = 1")
        full = search_messages(conn, "t*", limit=100, plan="full")
        assert _ranked(search_messages(conn, "t*", limit=100)) == _ranked(full)
        assert len(full) == 34
    finally:
        conn.close()
