"""The ``hermes`` FTS5 tokenizer and the DDL of the external-content message index.

The tokenizer is SQLite's ``unicode61`` (``remove_diacritics 2``) with one change: a token that
holds CJK characters (Han, kana, hangul) is split so each CJK character becomes its own token,
with byte offsets into the original text. CJK writing has no spaces between words, so this is
what lets a two-character query find a word inside a long sentence: the query is a phrase, and
FTS5 matches the phrase's characters as adjacent tokens. Text without CJK characters goes
through ``unicode61`` untouched: ASCII text costs one ``isascii()`` check, other text one
``isascii()`` per token. Document mode adds colocated identifier tokens (``with_identifiers``).

Two builds give the same tokens: this module's (the reference), and ``_hermes_fts5.c``, an
SQLite loadable extension built at install time so no Python runs per indexed row.
``register_tokenizer`` registers the compiled one when it is built (``tokenizer_build``) and
this one otherwise; an index written by either is read by the other.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any, cast

import apsw

from hermes_es.errors import ValidationError

TOKENIZER_NAME = "hermes"
"""Name the tokenizer is registered under; FTS tables say ``tokenize='hermes'``."""

PREFIX_INDEX = "3"
"""Prefix lengths FTS5 indexes separately, so an ``abc*`` query need not merge every term
that starts that way (the prefix search class stays within its latency budget). A two-letter
prefix is expanded into three-letter ones by the search (``queries.bm25``); a one-letter
prefix is merged by FTS5. Layout 8 dropped the two-letter index (``2 3`` before): ~30% of the
index's bytes (bench/README.md, bench_vs_hermes)."""

BASE_TOKENIZER = "unicode61"
BASE_ARGS = ("remove_diacritics", "2")

# Scripts written without spaces between words (plus Korean, whose words carry attached
# particles): Hangul Jamo, CJK radicals, ideographic iteration marks, kana, bopomofo, hangul
# compatibility jamo, CJK ideographs (all extension planes), compatibility ideographs,
# halfwidth kana and hangul, kana supplement.
_CJK_CLASS = (
    "\u1100-\u11ff"
    "\u2e80-\u2fdf"
    "\u3005-\u3007\u3021-\u3029\u3031-\u3035\u3038-\u303c"
    "\u3040-\u30ff"
    "\u3100-\u31ff"
    "\u3400-\u4dbf"
    "\u4e00-\u9fff"
    "\ua960-\ua97f"
    "\uac00-\ud7ff"
    "\uf900-\ufaff"
    "\uff66-\uffdc"
    "\U0001b000-\U0001b16f"
    "\U00020000-\U0003ffff"
)
_CJK = re.compile(f"[{_CJK_CLASS}]")
_ALL_CJK = re.compile(f"[{_CJK_CLASS}]+")
_CJK_OR_RUN = re.compile(f"[{_CJK_CLASS}]|[^{_CJK_CLASS}]+")

Token = tuple[int, int, str]
"""A token as FTS5 wants it: start and end byte offsets into the UTF-8 input, and its text."""
Tokenizer = Callable[[bytes, int, str | None], list[Token]]


def _base_tokens(
    base: apsw.FTS5Tokenizer, utf8: bytes, flags: int, locale: str | None
) -> list[Token]:
    """Run the wrapped ``unicode61`` tokenizer (it never makes colocated tokens)."""
    return cast(list[Token], base(utf8, flags, locale))


def contains_cjk(text: str) -> bool:
    """Tell whether ``text`` holds a character the tokenizer indexes one by one."""
    return not text.isascii() and _CJK.search(text) is not None


def _split_cjk_token(
    base: apsw.FTS5Tokenizer, utf8: bytes, token: Token, flags: int
) -> list[Token]:
    """Split one ``unicode61`` token into per-character CJK tokens and folded non-CJK runs."""
    start, end = token[0], token[1]
    try:
        original = utf8[start:end].decode("utf-8")
    except UnicodeDecodeError:
        return [token]
    pieces: list[Token] = []
    offset = start
    for match in _CJK_OR_RUN.finditer(original):
        piece = match.group()
        size = len(piece.encode("utf-8"))
        if len(piece) == 1 and _CJK.match(piece):
            pieces.append((offset, offset + size, piece))
        else:
            # Re-tokenize the non-CJK run so it is folded exactly as unicode61 folds it.
            for sub_start, sub_end, sub in _base_tokens(
                base, utf8[offset : offset + size], flags, None
            ):
                pieces.append((offset + sub_start, offset + sub_end, sub))
        offset += size
    return pieces


def _split_tokens(
    base: apsw.FTS5Tokenizer, utf8: bytes, tokens: Iterable[Token], flags: int
) -> list[Token]:
    """Pass non-CJK tokens through and split the ones that hold CJK characters.

    A token of only BMP CJK characters (3 UTF-8 bytes each) is split straight from its text:
    ``unicode61`` folds no character in the CJK ranges, so that text is the original.
    """
    result: list[Token] = []
    append = result.append
    for token in tokens:
        start, end, text = token
        if text.isascii():
            append(token)
        elif end - start == 3 * len(text) and _ALL_CJK.fullmatch(text):
            result += [
                (start + k, start + k + 3, ch)
                for k, ch in zip(range(0, end - start, 3), text, strict=True)
            ]
        elif _CJK.search(text) is None:
            append(token)
        else:
            result += _split_cjk_token(base, utf8, token, flags)
    return result


def make_tokenizer(base: apsw.FTS5Tokenizer) -> Tokenizer:
    """Wrap a ``unicode61`` tokenizer so CJK characters become one token each.

    In query mode a text that starts with ``IDENTIFIER_MARK`` is one token as it is (an
    identifier token, ``joined_text``); the search builds those, a user's text never holds the
    mark (``queries/fts_query.py`` turns control characters into spaces)."""

    def tokenize(utf8: bytes, flags: int, locale: str | None) -> list[Token]:
        if utf8[:1] == _MARK and flags & apsw.FTS5_TOKENIZE_QUERY:
            return [(0, len(utf8), utf8.decode("utf-8", errors="replace"))]
        tokens = _base_tokens(base, utf8, flags, locale)
        if utf8.isascii():
            return tokens
        return _split_tokens(base, utf8, tokens, flags)

    return tokenize


IDENTIFIER_MARK = "\x1f"
"""First character of an identifier token (``joined_text``): never in a ``unicode61`` token,
so an identifier token equals no word and no word's prefix."""
_MARK = IDENTIFIER_MARK.encode()
IDENTIFIER_CHARS = 48
"""Longest identifier token, in characters after the mark (a longer run is cut there; a query
longer than this is matched as a phrase of its tokens instead)."""
_SPACE = frozenset(b" \t\n\r\x0b\x0c")
_CLASSES = bytes(
    97 if chr(i).isascii() and chr(i).isalnum() else 32 if chr(i) in " \t\n\r\x0b\x0c" else 46
    for i in range(256)
)
"""Every byte as ``a`` (an ASCII letter or digit), `` `` (ASCII space) or ``.`` (anything else):
an ASCII text with no ``a.a``, ``a..a`` or ``a...a`` in it has no run (a check that costs
about a tenth of tokenizing the text)."""
JOINER_BYTES = 3
"""Longest text between two tokens of one run (UTF-8 bytes, no space): ``_``, ``.``, ``://``."""


def joined_text(utf8: bytes, tokens: Sequence[Token], limit: int | None = IDENTIFIER_CHARS) -> str:
    """The identifier token of ``tokens`` (adjacent tokens of one run, in order): each token as
    the index holds it, the text between them as written, after ``IDENTIFIER_MARK``; cut at
    ``limit`` characters after the mark (None: whole)."""
    parts = [tokens[0][2]]
    size = len(parts[0])
    for prev, token in itertools.pairwise(tokens):
        if limit is not None and size >= limit:
            break
        gap = utf8[prev[1] : token[0]].decode("utf-8", errors="replace")
        parts += (gap, token[2])
        size += len(gap) + len(token[2])
    text = "".join(parts)
    return IDENTIFIER_MARK + (text if limit is None else text[:limit])


def _joined(utf8: bytes, end: int, start: int) -> bool:
    """Tell whether the text between two tokens (``end`` of one, ``start`` of the next) is
    1 to ``JOINER_BYTES`` bytes with no space (one run)."""
    if start - end == 1:
        return utf8[end] not in _SPACE
    gap = utf8[end:start]
    if not gap or len(gap) > JOINER_BYTES or not _SPACE.isdisjoint(gap):
        return False
    return gap.isascii() or not any(ch.isspace() for ch in gap.decode("utf-8", errors="replace"))


def _may_have_runs(utf8: bytes) -> bool:
    if not utf8.isascii():
        return True
    classes = utf8.translate(_CLASSES)
    return b"a.a" in classes or b"a..a" in classes or b"a...a" in classes


def runs(utf8: bytes, tokens: Sequence[Token]) -> list[tuple[int, int]]:
    """(first, end) token index ranges of the runs of two or more tokens joined by punctuation
    (``snake_case``, ``v1.2.3``, ``src/main.py``, ``a@b.com``; ``_joined``): what identifier
    tokens cover."""
    found: list[tuple[int, int]] = []
    if len(tokens) < 2 or not _may_have_runs(utf8):
        return found
    first = 0
    end = tokens[0][1]
    space = _SPACE
    for i in range(1, len(tokens)):
        start, next_end, _ = tokens[i][:3]
        # The common case inlined: one byte between the two tokens.
        joined = utf8[end] not in space if start - end == 1 else _joined(utf8, end, start)
        end = next_end
        if not joined:
            if i - first >= 2:
                found.append((first, i))
            first = i
    if len(tokens) - first >= 2:
        found.append((first, len(tokens)))
    return found


def with_identifiers(utf8: bytes, tokens: list[Token]) -> list[Token]:
    """``tokens`` with an identifier token colocated at each token of a run that another token
    of the run follows: the run's text from that token on (``joined_text``). An identifier
    query matches the identifier token it starts as a prefix (``queries/identifiers.py``)."""
    spans = runs(utf8, tokens)
    if not spans:
        return tokens
    out: list[Any] = list(tokens)
    for first, end in spans:
        for i in range(first, end - 1):
            out[i] = (*tokens[i], joined_text(utf8, tokens[i:end]))
    return cast(list[Token], out)


def _factory(connection: apsw.Connection, args: list[str]) -> Tokenizer:
    """Build a ``hermes`` tokenizer; extra ``tokenize=`` arguments go to ``unicode61``.

    Indexing (document mode) adds the identifier tokens (``with_identifiers``); queries and
    the read side's own calls (snippets, ``queries/tokens.py``) get the plain tokens."""
    base = connection.fts5_tokenizer(BASE_TOKENIZER, [*BASE_ARGS, *args])
    plain = make_tokenizer(base)

    def tokenize(utf8: bytes, flags: int, locale: str | None) -> list[Token]:
        tokens = plain(utf8, flags, locale)
        if flags & apsw.FTS5_TOKENIZE_DOCUMENT and len(tokens) > 1:
            return with_identifiers(utf8, tokens)
        return tokens

    return tokenize


COMPILED_ENTRY_POINT = "sqlite3_hermesfts_init"
"""Init function of the compiled tokenizer (``_hermes_fts5.c``, an SQLite loadable extension)."""
COMPILED_MARKER = "hermes_tokenizer_build"
"""SQL function the compiled tokenizer registers beside it: ``SELECT hermes_tokenizer_build()``
is ``'c'`` on a connection that has it."""
TOKENIZER_ENV = "HERMES_FTS_TOKENIZER"
"""Set to ``python`` to register the Python tokenizer even when the compiled one is built (to
compare the two; both give the same tokens)."""


@cache
def compiled_library() -> Path | None:
    """The compiled ``hermes`` tokenizer built at install time, or None when it was not built
    (no C compiler or no ``sqlite3ext.h`` at install time)."""
    here = Path(__file__).parent
    for suffix in EXTENSION_SUFFIXES:
        path = here / f"_hermes_fts5{suffix}"
        if path.is_file():
            return path
    return None


_load_errors: list[str] = []


def tokenizer_build() -> str:
    """Which tokenizer ``register_tokenizer`` registers: ``"c"`` (the compiled one) or
    ``"python"`` (this module's; the compiled one is missing, failed to load, or
    ``HERMES_FTS_TOKENIZER=python``)."""
    if os.environ.get(TOKENIZER_ENV, "").lower() == "python":
        return "python"
    return "c" if compiled_library() is not None and not _load_errors else "python"


def tokenizer_load_error() -> str | None:
    """Why the compiled tokenizer failed to load in this process (None: it did not fail)."""
    return _load_errors[0] if _load_errors else None


def load_compiled_tokenizer(conn: apsw.Connection, library: Path) -> None:
    """Register the compiled ``hermes`` tokenizer on ``conn`` from ``library``."""
    conn.enable_load_extension(True)
    try:
        conn.load_extension(str(library), COMPILED_ENTRY_POINT)
    finally:
        conn.enable_load_extension(False)


def register_python_tokenizer(conn: apsw.Connection, name: str = TOKENIZER_NAME) -> None:
    """Register this module's ``hermes`` tokenizer on ``conn`` as ``name`` (the reference the
    compiled one is tested against; the fallback when it is missing)."""
    conn.register_fts5_tokenizer(name, _factory)


def register_tokenizer(conn: apsw.Connection) -> None:
    """Register the ``hermes`` tokenizer on ``conn`` (needed by every connection using FTS):
    the compiled one when it is built, else the Python one (same tokens; ``tokenizer_build``)."""
    library = compiled_library()
    if library is not None and tokenizer_build() == "c":
        try:
            load_compiled_tokenizer(conn, library)
            return
        except apsw.Error as exc:
            _load_errors.append(f"{library}: {exc}")
    register_python_tokenizer(conn)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _check_identifier(kind: str, name: str) -> str:
    """Return ``name`` if it is a plain SQL identifier, else raise ``ValidationError``."""
    if not _IDENTIFIER.match(name):
        raise ValidationError(
            f"invalid FTS {kind} name {name!r}: use letters, digits, _", subject=name
        )
    return name


def create_fts_sql(
    table: str = "messages_fts", content: str = "messages", content_rowid: str = "id"
) -> str:
    """SQL script creating the external-content FTS5 index over ``content.content``.

    The script holds two statements (run it with ``conn.execute``): the ``CREATE VIRTUAL
    TABLE IF NOT EXISTS`` and the insert that turns on FTS5 ``secure-delete``, so a deleted
    message leaves no trace of its tokens in the index. Both are safe to run again.
    """
    table = _check_identifier("table", table)
    content = _check_identifier("content table", content)
    content_rowid = _check_identifier("content rowid", content_rowid)
    return (
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5("
        f"content, content='{content}', content_rowid='{content_rowid}', "
        f"tokenize='{TOKENIZER_NAME}', prefix='{PREFIX_INDEX}');\n"
        f"INSERT INTO {table}({table}, rank) VALUES('secure-delete', 1);"
    )


# -- filling a fresh index (a rebuild) --------------------------------------------------------

FILL_CRISISMERGE = 200
"""Segments a level of an index being filled holds before FTS5 merges them all into one of
the next level. A rebuild writes ~5 segments a batch of 5,000 messages (~5,000 at 5,000,000
messages): with 200, every posting is written three times at most (its segment, one merge of
200 of them, the final merge) up to ~40,000 segments; with 64, a second level of merges began
at ~4,000 segments (4,100,000 messages) and rewrote most of the index once more inside one
batch (~48 s of the writer's CPU at 5,000,000; bench/README.md, big_store, "Rebuild at
5,000,000 messages"). FTS5 allows 2,000 segments in all, so two full levels stay well below."""
FILL_OPTIONS = (("automerge", 0), ("crisismerge", FILL_CRISISMERGE))
"""FTS5 options of an index a replay fills from nothing (``fill_options``). FTS5 writes the
rows of each transaction as a new segment (and another each time a megabyte of them is
pending) and, by default (``automerge`` 4), merges every four segments of a level into one of
the next level as it goes, so each posting is written again at every level it climbs. During a
fill nothing is merged until a level holds ``crisismerge`` segments (then all of them into
one); ``merge_step`` merges what is left into one segment once the fill is done
(``bench/README.md``, big_store, "Rebuild: the collector and the index merges")."""
LIVE_OPTIONS = (("automerge", 4), ("crisismerge", 16))
"""FTS5's own defaults for those options, put back once a fill is merged (``live_options``):
appends to a rebuilt index are merged as in an index that was never rebuilt."""
MERGE_PAGES = 2000
"""Leaf pages (4 KiB each) one ``merge_step`` writes at most: one short transaction."""
UPKEEP_PAGES = 64
"""Leaf pages one ``upkeep_step`` (after a live write) merges at most. With 16, a merge took
four times as many appends to finish, and its unfinished output was one more segment for every
search to read meanwhile (7.0 segments on average over the bench store's last 2,000 appends,
5.95 with 64; with 64 fewer blocks written, too)."""


def _set_options(conn: apsw.Connection, table: str, options: tuple[tuple[str, int], ...]) -> None:
    table = _check_identifier("table", table)
    for key, value in options:
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES(?, ?)", (key, value))


def fill_options(conn: apsw.Connection, table: str) -> None:
    """Set ``FILL_OPTIONS`` on ``table`` (an index a replay is about to fill)."""
    _set_options(conn, table, FILL_OPTIONS)


def live_options(conn: apsw.Connection, table: str) -> None:
    """Put FTS5's defaults back on ``table`` (``LIVE_OPTIONS``)."""
    _set_options(conn, table, LIVE_OPTIONS)


def merge_step(conn: apsw.Connection, table: str, pages: int = MERGE_PAGES) -> bool:
    """Merge the segments of ``table`` toward a single one, writing about ``pages`` leaf pages
    (FTS5's ``'merge'`` with a negative count: every segment, whatever its level). False when
    there was nothing left to merge (the command changed fewer than two rows: FTS5's own
    test of a merge that did nothing)."""
    table = _check_identifier("table", table)
    before = conn.total_changes()
    conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('merge', ?)", (-pages,))
    changed: int = conn.total_changes() - before
    return changed >= 2


def upkeep_step(conn: apsw.Connection, table: str) -> None:
    """Keep a live index in few segments: one bounded merge after the rows of a write, in
    its transaction (FTS5's ``'merge'`` with a positive count).

    FTS5 writes each transaction's rows as a new segment and merges a level only every 64
    leaf pages written (``automerge``'s work unit) or once it holds 16 (``crisismerge``), so a
    store written one message a transaction kept 10-30 segments, and every term of every
    search reads each of them (at 100,000 messages: 28 against 8 written in bulk; an
    identifier's prefix look-up 0.06 ms against 0.02; ``bench/README.md``, "Search: one-word
    windows in C, merged live index"). With a positive count FTS5 merges the level holding
    the most segments once it holds ``usermerge`` of them (its default, 4), about
    ``UPKEEP_PAGES`` leaf pages a call (a bigger merge resumes at the next call), and does
    nothing otherwise. Rows and results are unchanged; only the segment layout is. A replay
    filling an index from nothing runs no step (``FILL_OPTIONS``, ``merge_step``)."""
    table = _check_identifier("table", table)
    conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('merge', ?)", (UPKEEP_PAGES,))
