"""The compiled ``hermes_term_counts`` FTS5 function against the Python ``hermes_frequencies``
(``queries/bm25.py``, the reference): the same value for every row of every query shape (one
term, two, three, prefixes expanded into many phrases, counts past 65535, CJK, identifiers), and
the same index totals; a connection without the compiled build scores with the Python one.

Skips only where the compiled build cannot be made (as ``tests/projections/test_fts_compiled.py``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.projections import fts
from hermes_es.projections.catalog import connect
from hermes_es.queries import bm25
from tests.compiled_build import require_compiled_build

_WORDS = [f"w{k}" for k in range(60)] + ["co", "cob", "coz9", "coé", "chat-send", "全文搜索"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Messages of random words, a few very long ones (70,000 repeats of one word)."""
    require_compiled_build()
    rng = random.Random(20261202)
    home = tmp_path_factory.mktemp("counts")
    with SessionEngine.open(home) as engine:
        sid = engine.start_session("cli", cwd=str(home))
        turn = [
            {"role": "user", "content": " ".join(rng.choices(_WORDS, k=rng.randint(1, 30)))}
            for _ in range(300)
        ]
        turn += [{"role": "user", "content": "w1 " * 70_000 + "w2 w3"}]
        turn += [{"role": "user", "content": "w1 w2 " * 33_000}]
        engine.append_turn(sid, turn)
    return home / "state.db"


@pytest.fixture(scope="module")
def conn(store: Path) -> Iterator[apsw.Connection]:
    c = connect(store)
    yield c
    c.close()


_QUERIES = [
    "w1", "w7", "co*", "w1 w2", "w2 w1", "w1 w2 w3", "w4 co*", "co* w5 w6", '"w1 w2"',
    "chat-send", "全文搜索 w3", "w1 w1", "nothing",
]  # fmt: skip


@pytest.mark.parametrize("query", _QUERIES)
def test_compiled_counts_equal_the_python_function(conn: apsw.Connection, query: str) -> None:
    """Every row's value and the index totals are the Python function's."""
    compiled = bm25._frequencies(conn)
    assert isinstance(compiled, bm25._CompiledFrequencies)
    python = bm25._Frequencies()
    name = f"hermes_frequencies_{_QUERIES.index(query)}"  # FTS5 keeps the first of a name
    conn.register_fts5_function(name, python)
    candidates = bm25.Candidates(conn, query)
    assert candidates.freq is compiled
    rows = {}
    for freq in (compiled, python):
        call, args = freq.call(candidates.sizes)
        call = call.replace("hermes_frequencies(", f"{name}(")
        sql = f"SELECT rowid, {call} FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid"
        rows[type(freq).__name__] = conn.execute(sql, [*args, candidates.match]).fetchall()
    assert rows["_CompiledFrequencies"] == rows["_Frequencies"]
    if query != "nothing":
        assert rows["_Frequencies"]
        assert compiled.totals(conn) == python.totals(conn)
    values = [v for _, v in rows["_Frequencies"]]
    if query in ("w1 w2", "w1 w2 w3"):  # the long rows take the text form
        assert any(isinstance(v, str) for v in values)


def test_without_the_compiled_build_the_python_function_scores(store: Path) -> None:
    """A connection with only the Python tokenizer gets ``hermes_frequencies``, and the window
    plan's pages are the compiled connection's."""
    plain = apsw.Connection(str(store))
    fts.register_python_tokenizer(plain)
    compiled = connect(store)
    try:
        assert isinstance(bm25._frequencies(plain), bm25._Frequencies)
        for query in ("w1", "w1 w2", "co* w5 w6"):
            a = bm25.Candidates(plain, query).page(None, 50)
            b = bm25.Candidates(compiled, query).page(None, 50)
            assert a == b and a, query
    finally:
        plain.close()
        compiled.close()


def test_the_two_term_scorer_is_bm25_to_the_bit() -> None:
    """The inlined two-term scorer gives ``_bm25``'s floats for packed and text values."""
    rng = random.Random(7)
    raw: list[tuple[int | str, int]] = []
    for rowid in range(2000):
        length, a, b = rng.randint(1, 5000), rng.randint(0, 70), rng.randint(0, 70)
        raw.append((-((length << 32) | (a << 16) | b) - 1, rowid))
    raw += [("70002 70000 1", 2000), ("12 3 0", 2001)]
    idfs, avgdl = [rng.uniform(1e-6, 9.0), rng.uniform(1e-6, 9.0)], 38.7
    expected = [(bm25._bm25(*bm25._unpack(v), idfs, avgdl), r) for v, r in raw]
    assert bm25._two_term_scores(raw, idfs, avgdl) == expected
