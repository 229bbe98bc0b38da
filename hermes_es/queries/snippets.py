"""Highlighted snippets cut from stored message text with the ``hermes`` tokenizer.

``Highlighter.snippet`` is the reference; the compiled build's ``hermes_snippet`` SQL function
(``projections/_hermes_fts5.c``) cuts the same snippet in C inside the statement that reads the
text (``Highlighter.sql``), so neither the text nor its tokens pass through Python (3,000 texts of
the 100,000-message bench store: ~100 µs a snippet in Python, ~30 µs in C counting a statement
of its own, at a load of 6).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from weakref import WeakKeyDictionary

import apsw

from hermes_es.queries.fts_query import Term, parse_terms
from hermes_es.queries.tokens import text_tokenizer

SNIPPET_OPEN = "\x02"
SNIPPET_CLOSE = "\x03"
SNIPPET_TOKENS = 16
_OPEN = SNIPPET_OPEN.encode()
_CLOSE = SNIPPET_CLOSE.encode()
_ELLIPSIS = "…".encode()
SNIPPET_FUNCTION = "hermes_snippet"
"""The compiled build's snippet function: ``hermes_snippet(text, exact, prefixes, size)``, the
query tokens of each kind joined by ``TOKEN_SEPARATOR``."""
TOKEN_SEPARATOR = "\x1e"
"""Between the query tokens handed to ``hermes_snippet`` (a control character: in no token)."""

_COMPILED: WeakKeyDictionary[apsw.Connection, bool] = WeakKeyDictionary()


def compiled_snippets(conn: apsw.Connection) -> bool:
    """Whether ``conn`` has the compiled ``hermes_snippet`` (an SQLite connection with the
    compiled tokenizer loaded; another backend's connection cuts snippets in Python)."""
    if not isinstance(conn, apsw.Connection):
        return False
    try:
        return _COMPILED[conn]
    except KeyError:
        pass
    try:
        conn.execute(f"SELECT {SNIPPET_FUNCTION}('', '', '', 1)").fetchall()
        found = True
    except apsw.SQLError:
        found = False
    _COMPILED[conn] = found
    return found


class Highlighter:
    """Marks query tokens in message text the way FTS5 ``snippet()`` would, without FTS5.

    FTS5 would re-run the whole MATCH for every snippet (for a short prefix that means merging
    thousands of doclists each time), so snippets are cut here from the stored text with the
    same ``hermes`` tokenizer (called as a Python function, ``queries/tokens.py``): a token is
    a hit when it equals a query token, or starts with the last token of a prefix term.
    """

    def __init__(
        self, conn: apsw.Connection, query: str, terms: Sequence[Term] | None = None
    ) -> None:
        self.tokenizer = text_tokenizer(conn)
        self.exact: set[str] = set()
        prefixes: list[str] = []
        for term in parse_terms(query) if terms is None else terms:
            tokens = [t[2] for t in self._tokens(term.text, apsw.FTS5_TOKENIZE_QUERY)]
            if not tokens:
                continue
            if term.prefix:
                self.exact.update(tokens[:-1])
                prefixes.append(tokens[-1])
            else:
                self.exact.update(tokens)
        self.prefixes = tuple(prefixes)
        self.compiled = compiled_snippets(conn)
        """The connection cuts snippets in SQL (``sql``); else ``snippet`` cuts them here."""
        self._is_hit: Callable[[str], bool] = (
            self._exact_or_prefix if self.prefixes else self.exact.__contains__
        )

    def sql(
        self, text: str, number: int | None = None, size: int = SNIPPET_TOKENS
    ) -> tuple[str, list[object]]:
        """The SQL expression of the snippet of ``text`` (an SQL expression) by
        ``hermes_snippet``, and its two arguments: bare ``?`` placeholders, or ``?number`` and
        ``?number+1``."""
        marks = ("?", "?") if number is None else (f"?{number}", f"?{number + 1}")
        args: list[object] = [
            TOKEN_SEPARATOR.join(sorted(self.exact)),
            TOKEN_SEPARATOR.join(self.prefixes),
        ]
        return f"{SNIPPET_FUNCTION}({text}, {marks[0]}, {marks[1]}, {int(size)})", args

    def _tokens(self, text: str, flags: int) -> list[tuple[int, int, str]]:
        return self.tokenizer(text.encode("utf-8"), flags, None)

    def _exact_or_prefix(self, token: str) -> bool:
        return token in self.exact or token.startswith(self.prefixes)

    def snippet(self, text: str, size: int = SNIPPET_TOKENS) -> str:
        """About ``size`` tokens around the first hit, hits wrapped in \x02 … \x03."""
        utf8 = text.encode("utf-8")
        tokens = self.tokenizer(utf8, apsw.FTS5_TOKENIZE_DOCUMENT, None)
        if not tokens:
            return text[:120]
        is_hit = self._is_hit
        first = next((i for i, t in enumerate(tokens) if is_hit(t[2])), 0)
        lo = max(0, min(first - size // 4, len(tokens) - size))
        hi = min(len(tokens), lo + size)
        start = 0 if lo == 0 else tokens[lo][0]
        end = len(utf8) if hi == len(tokens) else tokens[hi - 1][1]
        out: list[bytes] = [_ELLIPSIS if lo else b""]
        pos = start
        for i in range(lo, hi):
            a, b, tok = tokens[i]
            if is_hit(tok):
                if a == pos and out and out[-1] == _CLOSE:
                    out[-1:] = [utf8[a:b], _CLOSE]  # extend an adjacent hit
                else:
                    out += [utf8[pos:a], _OPEN, utf8[a:b], _CLOSE]
                pos = b
        out.append(utf8[pos:end])
        if hi < len(tokens):
            out.append(_ELLIPSIS)
        return b"".join(out).decode("utf-8", errors="replace")
