"""Turn whatever a person typed into a safe FTS5 MATCH expression.

Rules: whitespace separates terms and every term must match (AND). Each term becomes a quoted
FTS5 phrase (inner ``"`` doubled), so punctuation inside it (``chat-send``, ``P2.2``,
``a@b.com``, URLs, ``NEAR(``, ``:``, ``^``, parentheses) is never query syntax: the tokenizer
splits the phrase into adjacent tokens. Text in double quotes stays one phrase; a ``*`` right
after a term or a closing quote makes it a prefix query. A leading ``-`` is plain text, not
NOT. CJK runs need nothing special: the ``hermes`` tokenizer turns a quoted CJK run into a
phrase of characters. Terms with no letter or digit are dropped.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

# Characters unicode61 treats as token characters by default: letters, numbers, private use.
_TOKEN_CATEGORIES = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Nd", "Nl", "No", "Co"})


@dataclass(frozen=True, slots=True)
class Term:
    """One search term: its text and whether it matches as a prefix."""

    text: str
    prefix: bool = False
    quoted: bool = False
    """Typed in double quotes (an exact phrase: never an identifier prefix)."""
    identifier: str = ""
    """The identifier token the term matches as a prefix, when the SQLite search made it one
    (``queries/identifiers.py``); empty: the term is matched as its phrase."""

    def to_fts(self) -> str:
        """Render the term as a quoted FTS5 phrase, with ``*`` when it is a prefix (an
        identifier term: its identifier token, always a prefix)."""
        if self.identifier:
            return '"' + self.identifier.replace('"', '""') + '"*'
        quoted = '"' + self.text.replace('"', '""') + '"'
        return quoted + "*" if self.prefix else quoted


def _clean(user_query: str) -> str:
    """Replace control characters and lone surrogates with spaces."""
    if user_query.isascii() and user_query.isprintable():
        return user_query
    return "".join(" " if unicodedata.category(ch) in ("Cc", "Cs") else ch for ch in user_query)


def _is_searchable(text: str) -> bool:
    """Tell whether ``text`` holds at least one character the tokenizer indexes."""
    if text.isascii():
        return any(ch.isalnum() for ch in text)
    return any(unicodedata.category(ch) in _TOKEN_CATEGORIES for ch in text)


def _bare_term(word: str) -> Term:
    """A whitespace-separated word: trailing ``*`` marks a prefix query."""
    stripped = word.rstrip("*")
    return Term(stripped, prefix=stripped != word)


def _scan(text: str) -> list[Term]:
    """Split cleaned input into bare words and double-quoted phrases, in order."""
    terms: list[Term] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch == '"':
            close = text.find('"', i + 1)
            end = n if close < 0 else close
            phrase = text[i + 1 : end]
            i = end + 1
            prefix = close >= 0 and i < n and text[i] == "*"
            while i < n and text[i] == "*":
                i += 1
            terms.append(Term(phrase, prefix=prefix, quoted=True))
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] != '"':
                i += 1
            terms.append(_bare_term(text[start:i]))
    return terms


def parse_terms(user_query: str) -> list[Term]:
    """The searchable terms of ``user_query``, in order, as ``Term`` values."""
    return [t for t in _scan(_clean(user_query)) if _is_searchable(t.text)]


def build_match(user_query: str) -> str | None:
    """A safe FTS5 MATCH expression ANDing every term, or None if nothing is searchable."""
    terms = parse_terms(user_query)
    if not terms:
        return None
    return " AND ".join(term.to_fts() for term in terms)


def query_terms(user_query: str) -> list[str]:
    """The plain text of each searchable term (no quotes or ``*``), for highlighting."""
    return [" ".join(term.text.split()) for term in parse_terms(user_query)]
