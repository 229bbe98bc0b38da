"""The compiled ``hermes`` tokenizer (``_hermes_fts5.c``) against the Python one (``fts.py``,
the reference): the same tokens, offsets and colocated identifier tokens for any input, in every
tokenize mode and with ``tokenize=`` arguments; an index written by one is read by the other;
and the store the engine opens runs the compiled one.

The compiled tokenizer is built by ``pip install`` (``make install``). Its tests skip only on a
machine that cannot build it (no C compiler or no ``sqlite3ext.h``; ``.ci/run`` installs the
header); where it could be built and is missing, they fail.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_es.projections import fts
from hermes_es.queries.fts_query import build_match
from tests.compiled_build import require_compiled_build

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.bench_tokenizer import make_message
from bench.hermes_workload import Workload
from tests.redact_corpus import CONTEXTS, LOOKALIKES, secret_cases

FLAGS = (
    apsw.FTS5_TOKENIZE_DOCUMENT,
    apsw.FTS5_TOKENIZE_QUERY,
    apsw.FTS5_TOKENIZE_QUERY | apsw.FTS5_TOKENIZE_PREFIX,
    apsw.FTS5_TOKENIZE_AUX,
)
ARGS: tuple[tuple[str, ...], ...] = (
    (),
    ("tokenchars", "_"),
    ("separators", "xé"),
    ("categories", "L* N* Co Mn"),
    ("remove_diacritics", "0"),
    ("bogus",),  # unicode61 refuses it: both builds fail to create the tokenizer
)


@pytest.fixture(scope="module")
def library() -> Path:
    """The compiled tokenizer (fails where it could have been built and is missing)."""
    return require_compiled_build()


@pytest.fixture(scope="module")
def pair(
    library: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[apsw.Connection, apsw.Connection]]:
    """(compiled, python): two connections to database files, each with one build as
    ``hermes``."""
    folder = tmp_path_factory.mktemp("builds")
    compiled = apsw.Connection(str(folder / "compiled.db"))
    fts.load_compiled_tokenizer(compiled, library)
    python = apsw.Connection(str(folder / "python.db"))
    fts.register_python_tokenizer(python)
    yield compiled, python
    compiled.close()
    python.close()


def _tokens(conn: apsw.Connection, args: tuple[str, ...], utf8: bytes, flags: int) -> object:
    try:
        return conn.fts5_tokenizer(fts.TOKENIZER_NAME, list(args))(utf8, flags, None)
    except apsw.Error as exc:
        return type(exc).__name__


def assert_same_tokens(
    pair: tuple[apsw.Connection, apsw.Connection], utf8: bytes, args: tuple[str, ...] = ()
) -> None:
    """Both builds give the same tokens for ``utf8`` in every mode."""
    compiled, python = pair
    for flags in FLAGS:
        expected = _tokens(python, args, utf8, flags)
        assert _tokens(compiled, args, utf8, flags) == expected, (utf8, flags, args)


# Every range of fts._CJK_CLASS, both ends and a middle.
_CJK_RANGES = [
    (ord(lo), ord(hi)) for lo, hi in zip(fts._CJK_CLASS[::3], fts._CJK_CLASS[2::3], strict=True)
]
assert set(fts._CJK_CLASS[1::3]) == {"-"}
NEAR_CJK = (0x10FF, 0x1200, 0x3004, 0x3008, 0x303D, 0xE000, 0xFFDD, 0x1AFFF, 0x1B170, 0x40000)
"""Code points just outside the ranges."""
CJK = st.sampled_from(
    sorted({chr(c) for lo, hi in _CJK_RANGES for c in (lo, hi, (lo + hi) // 2)})
    + [chr(c) for c in NEAR_CJK]
)
WORD = st.text(alphabet="abcXYZ019", min_size=1, max_size=8)
PUNCT = st.sampled_from([*list("_./-@:#?&=~+*'\"()[]{}<>,;!|\\$%^`"), "://", "..", "_-", "::"])
SPACE = st.sampled_from([" ", "  ", "\t", "\n", "\r\n", "\x0b", "\x0c", "\xa0", "\u3000",
                         "\u2028", "\x85", "\x1c", "\x1f", "\u2009"])  # fmt: skip
ODD = st.sampled_from(["é", "É", "ß", "ﬁ", "İ", "e\u0301", "\u0301", "ǅ", "Ω", "Привет", "ا",
                       "\u200d", "\ufeff", "😀", "\U0001f1ef\U0001f1f5", "½", "²", "Ⅻ", "\x00",
                       "\ufffd", "\U0010ffff", "\ue000"])  # fmt: skip
IDENTIFIER = st.one_of(
    st.builds(lambda a, b: f"{a}_{b}", WORD, st.integers(0, 99999)),
    st.builds(lambda a, b, c: f"{a}@{b}.{c}", WORD, WORD, st.sampled_from(["com", "org"])),
    st.builds(lambda a, b: f"https://{a}.org/{b}?q=1&p=2", WORD, WORD),
    st.builds(lambda p: "/" + "/".join(p) + ".py", st.lists(WORD, min_size=1, max_size=6)),
    st.builds(lambda a: "v" + ".".join(map(str, a)), st.lists(st.integers(0, 99), max_size=4)),
    st.builds(lambda a, b: f"{a}::{b}", WORD, WORD),
    st.builds(lambda a: "_".join(a), st.lists(WORD, min_size=2, max_size=30)),
)
PIECE = st.one_of(
    WORD, PUNCT, SPACE, ODD, CJK, IDENTIFIER, st.text(max_size=6),
    st.text(alphabet="a_", min_size=40, max_size=300),
)  # fmt: skip
TEXT = st.lists(PIECE, max_size=30).map("".join)


NOT_UTF8 = (
    b"\xff",
    b"\x80",
    b"\xc3",
    b"\xe4\xb8",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xc0\xaf",
)
"""Byte sequences that are not UTF-8: a stray byte, a cut sequence, a surrogate, past U+10FFFF,
an overlong form."""


@st.composite
def texts(draw: st.DrawFn) -> bytes:
    """UTF-8 of a mixed text, sometimes with bytes that are not UTF-8 (FTS5 gets whatever
    bytes a TEXT value holds)."""
    utf8 = draw(TEXT).encode("utf-8")
    if utf8 and draw(st.integers(0, 4)) == 0:
        data = bytearray(utf8)
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.sampled_from(NOT_UTF8))
        utf8 = bytes(data)
    if draw(st.integers(0, 9)) == 0:
        utf8 = fts._MARK + utf8
    return utf8


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(utf8=texts(), args=st.sampled_from(ARGS))
def test_same_tokens_as_python(
    pair: tuple[apsw.Connection, apsw.Connection], utf8: bytes, args: tuple[str, ...]
) -> None:
    """Any text, any mode, any arguments: the compiled tokens are the Python ones."""
    assert_same_tokens(pair, utf8, args)


def _index(conn: apsw.Connection, utf8: bytes) -> list[tuple[str, int, int]]:
    """What FTS5 stored for ``utf8``: each (term bytes as hex, column, offset)."""
    conn.execute(
        "CREATE VIRTUAL TABLE t USING fts5(x, tokenize='hermes');"
        "CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)"
    )
    try:
        conn.execute("INSERT INTO t(x) VALUES(CAST(? AS TEXT))", (utf8,))
        return list(conn.execute("SELECT hex(term), col, offset FROM v ORDER BY 1, 2, 3"))
    finally:
        conn.execute("DROP TABLE v; DROP TABLE t")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(utf8=texts())
def test_same_index_bytes(pair: tuple[apsw.Connection, apsw.Connection], utf8: bytes) -> None:
    """The index holds the same term bytes at the same positions (not only the same text once
    apsw has decoded it)."""
    compiled, python = pair
    assert _index(compiled, utf8) == _index(python, utf8)


def corpus() -> list[str]:
    """The bench workload's messages, the bench tokenizer's, and the redaction corpus."""
    rng = random.Random(5)
    out = [m.content for m in Workload(400, seed=2).messages()]
    out += [make_message(rng, 0.3) for _ in range(200)]
    for case in secret_cases():
        out += [context(case.snippet) for context in CONTEXTS.values()]
    return out + LOOKALIKES


def test_same_tokens_on_the_corpus(pair: tuple[apsw.Connection, apsw.Connection]) -> None:
    """The bench workload and the redaction corpus tokenize the same in both builds."""
    texts = corpus()
    assert len(texts) > 800
    for text in texts:
        assert_same_tokens(pair, text.encode("utf-8"))


def test_edge_cases(pair: tuple[apsw.Connection, apsw.Connection]) -> None:
    """Empty text, a mark alone, a huge token, a long run, an identifier cut at 48 chars."""
    for utf8 in (
        b"",
        b"\x1f",
        b"\x1fabc_def",
        b"a" * 100_000,
        b"_".join([b"seg"] * 5000),
        ("x" * 60 + "_" + "é" * 60 + "." + "模" * 30).encode(),
        "中文".encode() * 2000,
        b"a.b c..d e...f g....h i\xc2\xa0j k\xe3\x80\x80l m\x1cn o\x1c\xc3\x97p",
    ):
        assert_same_tokens(pair, utf8)


def _store(path: Path, register: object, rows: list[str]) -> None:
    conn = apsw.Connection(str(path))
    register(conn)  # type: ignore[operator]
    conn.execute(
        "CREATE TABLE messages(id INTEGER PRIMARY KEY, content TEXT);" + fts.create_fts_sql()
    )
    with conn:
        conn.executemany("INSERT INTO messages(content) VALUES(?)", [(r,) for r in rows])
        conn.execute("INSERT INTO messages_fts(rowid, content) SELECT id, content FROM messages")
    conn.close()


@pytest.mark.parametrize("writer", ["compiled", "python"])
def test_index_written_by_one_is_read_by_the_other(
    tmp_path: Path, library: Path, writer: str
) -> None:
    """An index one build wrote passes the other's integrity-check (which tokenizes every row
    again and compares) and answers its searches, identifier prefixes included."""

    def compiled(conn: apsw.Connection) -> None:
        fts.load_compiled_tokenizer(conn, library)

    builds = {"compiled": compiled, "python": fts.register_python_tokenizer}
    reader_name = "python" if writer == "compiled" else "compiled"
    rows = [*corpus()[:600], "see /home/x/src/main.py and fenlocalex_44364", "模型の検索"]
    _store(tmp_path / "state.db", builds[writer], rows)
    conn = apsw.Connection(str(tmp_path / "state.db"))
    builds[reader_name](conn)
    conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)")
    mark = fts.IDENTIFIER_MARK
    for match, row in (
        (f'"{mark}main.py" *', len(rows) - 1),
        (f'"{mark}fenlocalex_4" *', len(rows) - 1),
        (build_match("模型"), len(rows)),
        (build_match("fenlocalex_44364"), len(rows) - 1),
    ):
        hits = conn.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (match,)
        ).fetchall()
        assert (row,) in hits, match
    conn.close()


def test_the_engine_store_runs_the_compiled_tokenizer(tmp_path: Path, library: Path) -> None:
    """Where the compiled tokenizer is built, the engine's connections register it (and search
    through it)."""
    from hermes_es.commands.engine import SessionEngine

    assert fts.tokenizer_build() == "c"
    engine = SessionEngine.open(tmp_path / "state.db")
    try:
        conn = engine.store.connection()
        assert conn.execute(f"SELECT {fts.COMPILED_MARKER}()").fetchall() == [("c",)]
    finally:
        engine.close()


def test_python_build_when_asked(
    monkeypatch: pytest.MonkeyPatch, library: Path, tmp_path: Path
) -> None:
    """HERMES_FTS_TOKENIZER=python registers the Python tokenizer (no compiled marker)."""
    monkeypatch.setenv(fts.TOKENIZER_ENV, "python")
    assert fts.tokenizer_build() == "python"
    conn = apsw.Connection(str(tmp_path / "python.db"))
    fts.register_tokenizer(conn)
    with pytest.raises(apsw.SQLError):
        conn.execute(f"SELECT {fts.COMPILED_MARKER}()")
    assert conn.fts5_tokenizer(fts.TOKENIZER_NAME)(b"a_b", apsw.FTS5_TOKENIZE_DOCUMENT, None)
    conn.close()


def test_doctor_says_which_build(monkeypatch: pytest.MonkeyPatch, library: Path) -> None:
    """``hermes doctor``'s search.tokenizer: ok with the compiled build, info naming the
    switch when the Python one is asked for."""
    from hermes_es.commands.doctor import check_tokenizer

    found = check_tokenizer()
    assert (found.check, found.level) == ("search.tokenizer", "ok")
    assert str(library) in found.message
    monkeypatch.setenv(fts.TOKENIZER_ENV, "python")
    found = check_tokenizer()
    assert found.level == "info" and fts.TOKENIZER_ENV in found.message
