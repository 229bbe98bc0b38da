"""PostgreSQL search takes matches slice by slice of ids, newest first: the same matches as one
statement over the whole index."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.queries.search import search_messages
from hermes_es.store.postgres import search
from tests.pg_server import PgServer
from tests.postgres.search_reference import analyzed_store, whole_index

MESSAGES = 240


def _text(i: int) -> str:
    words = ["common"]
    if i % 7 == 0:
        words.append("sevens")
    if i in (3, 100, 201):
        words.append("rare")
    if i % 5 == 0:
        words.append("alpha beta")
    else:
        words.append("beta alpha")
    if i % 11 == 0:
        words.append("全文搜索")
    if i % 3 == 0:
        words.append("chat-send")
    return " ".join(words) + f" n{i}"


@pytest.fixture(scope="module")
def engine(pg_server: PgServer) -> Iterator[SessionEngine]:
    """A PostgreSQL store of MESSAGES messages with terms of every frequency, analyzed."""
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
    "com*",
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("size", [1, 5, 40, 1000])
def test_slices_find_the_newest_matches(
    engine: SessionEngine, query: str, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With slices of 8 rows, every query yields the newest ``size`` matches and their scores,
    exactly as one statement over the whole index does, below a bound too."""
    conn = engine.store.connection()
    calls: list[tuple[int | None, int, bool]] = []
    real = search._slice

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append((args[2], args[3], kwargs["walk"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(search, "_slice", counted)
    tsq = search.Query.of(query)
    assert tsq is not None
    for below in (None, whole_index(conn, query, None, 1)[0][1]):
        got = search.candidates(conn, tsq, below, size, first_slice=8, sliced=True)
        whole = search.candidates(conn, tsq, below, size, sliced=False)
        want = whole_index(conn, query, below, size)
        assert [m for _, m in got] == [m for _, m in want]
        assert [s for s, _ in got] == pytest.approx([s for s, _ in want])
        assert [m for _, m in whole] == [m for _, m in want]
    if size >= 40:  # the slicing ran: slices after the first one, both ways
        assert calls
    if query == "rare":  # a rare term is read from the index's bitmap
        assert not all(walk for _, _, walk in calls)
    if query == "common" and size >= 40:  # a term in every row is walked
        assert all(walk for _, _, walk in calls)


def test_sliced_search_equals_one_slice(engine: SessionEngine) -> None:
    """search_messages returns the same hits whether the index is read in slices or at once."""
    conn = engine.store.connection()
    for query in QUERIES:
        sliced = search.search_messages(
            conn, query, limit=20, where="", params=[], window=30, first_slice=8, sliced=True
        )
        whole = search.search_messages(
            conn, query, limit=20, where="", params=[], window=30, sliced=False
        )
        assert [h.message_id for h in sliced] == [h.message_id for h in whole]
        assert sliced
    rare = search_messages(conn, "rare", limit=20)
    assert len(rare) == 3


def test_slices_inside_a_transaction(engine: SessionEngine) -> None:
    """Inside the caller's transaction the slices run on its connection, same matches."""
    conn = engine.store.connection()
    for query in ("common", "rare", '"alpha beta"'):
        tsq = search.Query.of(query)
        assert tsq is not None
        outside = search.candidates(conn, tsq, None, 40, first_slice=8, sliced=True)
        with conn.transaction():
            inside = search.candidates(conn, tsq, None, 40, first_slice=8, sliced=True)
        assert inside == outside == whole_index(conn, query, None, 40)
