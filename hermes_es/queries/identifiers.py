"""Identifier queries: ``fenlocalex_4`` also finds ``fenlocalex_44364``, ``src/main.py`` finds
``/home/x/src/main.py``.

The index holds, besides the words, an identifier token at each token of a run of tokens
joined by punctuation with no space (``projections/fts.py``, ``with_identifiers``): the
run's text from that token on, as one token (``\\x1fsrc/main.py`` and ``\\x1fmain.py`` for
``src/main.py``). A bare query term that is itself such a run (``snake_case_name``,
``HTTP_404``, ``v1.2.3``, ``TKT-00123``) is matched as a prefix of those tokens: every text
holding the identifier at a token boundary, including longer identifiers that start with it
-- what a substring scan finds, less matches that start inside a word. One prefix look-up of
the identifier tokens replaces a phrase (position checks over every row holding its words).

Not identifiers: a term in double quotes (an exact phrase, as before), a term with a single
token (a word), a term longer than ``IDENTIFIER_CHARS`` (matched as its phrase).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import apsw

from hermes_es.projections.fts import IDENTIFIER_CHARS, joined_text, runs
from hermes_es.queries.fts_query import Term
from hermes_es.queries.tokens import text_tokenizer


def identifier_of(conn: apsw.Connection, term: Term) -> str:
    """The identifier token ``term`` is a prefix of ("": not an identifier term)."""
    if term.quoted:
        return ""
    utf8 = term.text.encode("utf-8")
    tokens = text_tokenizer(conn)(utf8, apsw.FTS5_TOKENIZE_DOCUMENT, None)
    if len(tokens) < 2 or runs(utf8, tokens) != [(0, len(tokens))]:
        return ""
    ident = joined_text(utf8, tokens, None)
    return ident if len(ident) <= IDENTIFIER_CHARS + 1 else ""


def identifier_terms(conn: apsw.Connection, terms: Sequence[Term]) -> list[Term]:
    """``terms`` with each identifier term marked with its identifier token (and as a prefix
    term: the plans treat it as one, the highlighter marks the words that start like its last
    token)."""
    out: list[Term] = []
    for term in terms:
        ident = identifier_of(conn, term)
        out.append(replace(term, prefix=True, identifier=ident) if ident else term)
    return out
