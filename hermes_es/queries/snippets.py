"""Highlighted snippets cut from stored message text with the ``hermes`` tokenizer."""

from __future__ import annotations

import apsw

from hermes_es.queries.fts_query import parse_terms

SNIPPET_OPEN = "\x02"
SNIPPET_CLOSE = "\x03"
SNIPPET_TOKENS = 16


class Highlighter:
    """Marks query tokens in message text the way FTS5 ``snippet()`` would, without FTS5.

    FTS5 would re-run the whole MATCH for every snippet (for a short prefix that means merging
    thousands of doclists each time), so snippets are cut here from the stored text with the
    same ``hermes`` tokenizer: a token is a hit when it equals a query token, or starts with
    the last token of a prefix term.
    """

    def __init__(self, conn: apsw.Connection, query: str) -> None:
        self.tokenizer = conn.fts5_tokenizer("hermes", [])
        self.exact: set[str] = set()
        self.prefixes: list[str] = []
        for term in parse_terms(query):
            tokens = [t[2] for t in self._tokens(term.text, apsw.FTS5_TOKENIZE_QUERY)]
            if not tokens:
                continue
            if term.prefix:
                self.exact.update(tokens[:-1])
                self.prefixes.append(tokens[-1])
            else:
                self.exact.update(tokens)

    def _tokens(self, text: str, flags: int) -> list[tuple[int, int, str]]:
        return [
            (int(t[0]), int(t[1]), str(t[2]))
            for t in self.tokenizer(text.encode("utf-8"), flags, None)
        ]

    def _is_hit(self, token: str) -> bool:
        return token in self.exact or any(token.startswith(p) for p in self.prefixes)

    def snippet(self, text: str, size: int = SNIPPET_TOKENS) -> str:
        """About ``size`` tokens around the first hit, hits wrapped in \x02 … \x03."""
        utf8 = text.encode("utf-8")
        tokens = self._tokens(text, apsw.FTS5_TOKENIZE_DOCUMENT)
        if not tokens:
            return text[:120]
        hits = [i for i, t in enumerate(tokens) if self._is_hit(t[2])]
        first = hits[0] if hits else 0
        lo = max(0, min(first - size // 4, len(tokens) - size))
        hi = min(len(tokens), lo + size)
        start = 0 if lo == 0 else tokens[lo][0]
        end = len(utf8) if hi == len(tokens) else tokens[hi - 1][1]
        out: list[bytes] = [b"\xe2\x80\xa6" if lo else b""]
        pos = start
        for i in range(lo, hi):
            a, b, tok = tokens[i]
            if self._is_hit(tok):
                if a == pos and out and out[-1] == SNIPPET_CLOSE.encode():
                    out[-1:] = [utf8[a:b], SNIPPET_CLOSE.encode()]  # extend an adjacent hit
                else:
                    out += [utf8[pos:a], SNIPPET_OPEN.encode(), utf8[a:b], SNIPPET_CLOSE.encode()]
                pos = b
        out.append(utf8[pos:end])
        if hi < len(tokens):
            out.append(b"\xe2\x80\xa6")
        return b"".join(out).decode("utf-8", errors="replace")
