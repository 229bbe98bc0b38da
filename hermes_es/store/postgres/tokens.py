"""The ``hermes`` tokenizer outside SQLite, so PostgreSQL search splits text exactly as FTS5 does.

Search must find the same messages on both backends. Rather than approximate SQLite's
``unicode61`` rules (case folding, diacritics removal, which characters are token characters)
with PostgreSQL's parser, the PostgreSQL backend runs the very same tokenizer: APSW exposes
FTS5 tokenizers as callables, and this module keeps one per thread on a database-less APSW
connection (``:memory:``, used only to host the tokenizer; it never stores anything).

Tokens become a ``tsvector`` literal with positions (so phrases match as adjacent lexemes, like
FTS5 phrases) and query terms become ``tsquery`` phrases (``a <-> b``, ``:*`` for a prefix).

Pair lexemes. A GIN index keeps no positions, so a phrase's matches were every row holding its
words, each checked against its positions in the table: for a phrase of frequent words
(``"the of"``) that is most of the store. So each ``tsvector`` also holds one lexeme per pair of
adjacent tokens, ``§`` + first + space + second (``'§chat send'``: no token holds ``§`` or a
space, so no word or word prefix can match one), and a term of several tokens is matched by its
pairs (``match_query``): the index then answers it from the postings of the pairs alone. A
message whose pairs are not all there (more tokens than ``MAX_POSITION``, a pair longer than
``PAIR_MAX_CHARS``, more than ``PAIR_BUDGET`` characters of pairs) holds the lexeme ``§``
instead of the missing ones, and is checked against its positions as before.

Prefix lexemes. A prefix (``dep*``) is answered by the GIN index by merging the postings of
every lexeme it covers, all of them, before anything else: no id range can bound that. So each
``tsvector`` also holds one lexeme per distinct first ``PREFIX_CHARS`` characters of its
tokens that long or longer, ``§<`` + those characters (``'§<dep'`` for ``deploy`` and
``deep``; ``<`` is a separator, so no token or pair starts with it), and a prefix term of
exactly that many characters is that one lexeme, with its own statistics.

Identifier lexemes. As in the FTS5 index, each token of a run of tokens joined by punctuation
with no space (``snake_case``, ``src/main.py``, ``a@b.com``) also has the run's text from that
token on at its position, after ``\\x1f`` (``projections/fts.py``, ``with_identifiers``): the
very tokens the ``hermes`` tokenizer colocates when it indexes. A bare query term that is such
a run is matched as a prefix of them (``queries/identifiers.py``): ``'\\x1fsrc/main.py':*``,
so ``fenlocalex_4`` finds ``fenlocalex_44364`` and not ``fenlocalex 4``, as on SQLite. No pair
or prefix lexeme is made from an identifier lexeme.
"""

from __future__ import annotations

import itertools
import threading
from typing import cast

import apsw

from hermes_es.projections.fts import (
    BASE_ARGS,
    BASE_TOKENIZER,
    IDENTIFIER_MARK,
    make_tokenizer,
    register_tokenizer,
    with_identifiers,
)
from hermes_es.queries.fts_query import parse_terms
from hermes_es.queries.identifiers import identifier_terms

MAX_POSITION = 16383
"""PostgreSQL's largest tsvector position; later tokens share it (see docs/postgres.md)."""

MAX_LEXEME_BYTES = 2046
"""PostgreSQL's longest lexeme; a longer token is cut to this many bytes (in documents and
queries alike, so it still matches itself)."""
PAIR = "\u00a7"
"""Starts every pair lexeme (``§``: a separator to the tokenizer, so in no token)."""
INCOMPLETE = PAIR
"""The lexeme of a message some of whose adjacent pairs are not indexed."""
PAIR_MAX_CHARS = 200
"""Longest pair lexeme indexed (characters)."""
PAIR_BUDGET = 32_768
"""Most characters of pair lexemes one message's ``tsvector`` holds."""
PREFIX = PAIR + "<"
"""Starts every prefix lexeme (``§<``; ``<`` is a separator to the tokenizer too)."""
PREFIX_CHARS = 3
"""Characters of a token its prefix lexeme holds: ``§<dep`` for every token of at least this
many characters starting with ``dep``, so the prefix term ``dep*`` is one lexeme."""

_local = threading.local()


def host() -> apsw.Connection:
    """This thread's tokenizer host (an APSW connection with the ``hermes`` tokenizer)."""
    conn: apsw.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = apsw.Connection(":memory:")
        register_tokenizer(conn)
        _local.conn = conn
        # The ``hermes`` tokenizer's own function over ``unicode61``, called directly: the
        # same tokens as through FTS5 (which would call back into it), at half the cost.
        _local.tokenizer = make_tokenizer(conn.fts5_tokenizer(BASE_TOKENIZER, list(BASE_ARGS)))
    return conn


def tokens(text: str, *, query: bool = False) -> list[str]:
    """The tokens of ``text`` as the FTS5 index (or, with ``query``, a MATCH) sees them."""
    host()
    flags = apsw.FTS5_TOKENIZE_QUERY if query else apsw.FTS5_TOKENIZE_DOCUMENT
    return [str(t[2]) for t in _local.tokenizer(text.encode("utf-8"), flags, None)]


def _fit(token: str) -> str:
    """``token`` cut to PostgreSQL's longest lexeme (``MAX_LEXEME_BYTES``)."""
    if len(token) * 4 <= MAX_LEXEME_BYTES:
        return token
    return token.encode("utf-8")[:MAX_LEXEME_BYTES].decode("utf-8", "ignore")


def _pair(first: str, second: str) -> str | None:
    """The pair lexeme of two adjacent tokens, None when too long to be indexed."""
    if len(first) + len(second) + 2 > PAIR_MAX_CHARS:
        return None
    return PAIR + first + " " + second


def _quote(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


_POSITIONS = [str(i) for i in range(MAX_POSITION + 1)]


def tsvector_literal(text: str) -> str:
    """The text's tokens with their positions, and its pair lexemes (see the module's
    docstring), as a ``tsvector`` input string."""
    positions: dict[str, list[str]] = {}
    pairs: dict[str, None] = {}
    get = positions.get
    host()
    utf8 = text.encode("utf-8")
    found = _local.tokenizer(utf8, apsw.FTS5_TOKENIZE_DOCUMENT, None)
    if len(found) > 1:
        found = with_identifiers(utf8, found)
    budget = PAIR_BUDGET
    complete = True
    before = ""
    for i, colocated in enumerate(found, start=1):
        token = colocated[2]
        if len(token) * 4 > MAX_LEXEME_BYTES:
            token = _fit(token)
        seen = get(token)
        where = _POSITIONS[i] if i < MAX_POSITION else _POSITIONS[MAX_POSITION]
        if seen is None:
            positions[token] = [where]
        elif len(seen) < 256:
            seen.append(where)
        if len(colocated) > 3:  # an identifier token at the same position
            ident = cast(tuple[int, int, str, str], colocated)[3]
            seen = get(ident)
            if seen is None:
                positions[ident] = [where]
            elif len(seen) < 256:
                seen.append(where)
        if i > 1:
            pair = _pair(before, token) if i < MAX_POSITION else None
            if pair is None or budget < len(pair):
                complete = False
            elif pair not in pairs:
                pairs[pair] = None
                budget -= len(pair)
        before = token
    if not complete:
        pairs[INCOMPLETE] = None
    for token in positions:
        if len(token) >= PREFIX_CHARS and token[0] != IDENTIFIER_MARK:
            pairs[PREFIX + token[:PREFIX_CHARS]] = None
    if "'" in text or "\\" in text:  # only then can a token need escaping
        words = [_quote(t) + ":" + ",".join(p) for t, p in positions.items()]
        return " ".join([*words, *map(_quote, pairs)])
    words = ["'" + t + "':" + ",".join(p) for t, p in positions.items()]
    return " ".join([*words, *("'" + p + "'" for p in pairs)])


def prefix_lexeme(word: str) -> str | None:
    """The lexeme a prefix term of the one token ``word`` is answered by, None when the term
    is not of ``PREFIX_CHARS`` characters (the index then merges every lexeme it covers) or
    is an identifier token."""
    if len(word) != PREFIX_CHARS or word[0] == IDENTIFIER_MARK:
        return None
    return PREFIX + word


Term = tuple[list[str], bool]
"""A searchable term: its tokens, and whether it is a prefix (an identifier term: its
identifier token alone, a prefix)."""


def is_identifier(words: list[str]) -> bool:
    """Whether a term's ``words`` are an identifier token (matched as a prefix)."""
    return len(words) == 1 and words[0][:1] == IDENTIFIER_MARK


def search_terms(user_query: str) -> list[Term]:
    """Each searchable term's (tokens, is a prefix)."""
    return _terms(user_query)


def pair_lexeme(first: str, second: str) -> str | None:
    """The pair lexeme of two adjacent tokens, None when too long to be indexed."""
    return _pair(first, second)


def _terms(user_query: str) -> list[tuple[list[str], bool]]:
    """Each searchable term's (tokens, is a prefix); an identifier term is its identifier
    token, a prefix (``queries/identifiers.py``, as on SQLite)."""
    found = []
    for term in identifier_terms(host(), parse_terms(user_query)):
        if term.identifier:
            found.append(([term.identifier], True))
            continue
        words = [_fit(w) for w in tokens(term.text, query=True)]
        if words:
            found.append((words, term.prefix))
    return found


def _phrase(words: list[str], prefix: bool) -> str:
    quoted = [_quote(w) for w in words]
    if prefix:
        quoted[-1] += ":*"
    return "(" + " <-> ".join(quoted) + ")" if len(quoted) > 1 else quoted[0]


def tsquery_text(user_query: str) -> str | None:
    """A ``tsquery`` ANDing every term as a phrase of its tokens (what ranking scores), or None
    when nothing is searchable."""
    parts = [_phrase(words, prefix) for words, prefix in _terms(user_query)]
    return " & ".join(parts) if parts else None


def match_query(user_query: str) -> str | None:
    """The ``tsquery`` that finds the messages matching ``user_query`` (the same ones as
    ``tsquery_text``), or None when nothing is searchable.

    A term of one token is that token; a prefix term of one token of ``PREFIX_CHARS``
    characters is its prefix lexeme (``dep*``: ``'§<dep'``). A term of two tokens is its pair
    lexeme, or the phrase in a message whose pairs are incomplete:
    ``'§a b' | '§' & 'a' <-> 'b'``. A longer term
    needs its phrase checked too: ``('§a b' & '§b c' | '§') & 'a' <-> 'b' <-> 'c'``. The index
    reads the postings of the rare lexemes first and skips through the frequent ones.
    """
    parts = [_term_match(words, prefix) for words, prefix in _terms(user_query)]
    return " & ".join(parts) if parts else None


def _term_match(words: list[str], prefix: bool) -> str:
    """One term of ``match_query``."""
    phrase = _phrase(words, prefix)
    if len(words) == 1:
        lexeme = prefix_lexeme(words[0]) if prefix else None
        return phrase if lexeme is None else _quote(lexeme)
    pairs = [_pair(a, b) for a, b in itertools.pairwise(words)]
    quoted = [_quote(p) for p in pairs if p is not None]
    if prefix and pairs[-1] is not None:
        quoted[-1] += ":*"
    marker = _quote(INCOMPLETE)
    if not quoted:
        return f"({marker} & {phrase})"
    if len(words) == 2 and pairs[0] is not None:
        return f"({quoted[0]} | {marker} & {phrase})"
    return f"(({' & '.join(quoted)} | {marker}) & {phrase})"


def index_query(user_query: str) -> tuple[str, bool] | None:
    """The part of ``match_query`` the GIN index can answer without positions, and whether
    the matches it finds still need ``match_query`` checked (None: nothing searchable).

    A term of one or two tokens is kept whole (the index answers a pair, and a phrase only in
    the rare messages with incomplete pairs). A longer term becomes its pairs, or the ``§``
    marker: ``('§a b' & '§b c' | '§')``, or without indexable pairs its tokens ANDed; its
    words' postings are then not read by the index, and the phrase is checked on the rows
    found (``needs_check``)."""
    parts: list[str] = []
    needs_check = False
    for words, prefix in _terms(user_query):
        if len(words) <= 2:
            parts.append(_term_match(words, prefix))
            continue
        needs_check = True
        pairs = [_pair(a, b) for a, b in itertools.pairwise(words)]
        quoted = [_quote(p) for p in pairs if p is not None]
        if prefix and pairs[-1] is not None:
            quoted[-1] += ":*"
        if quoted:
            parts.append(f"({' & '.join(quoted)} | {_quote(INCOMPLETE)})")
        else:
            last = [_quote(w) for w in words]
            if prefix:
                last[-1] += ":*"
            parts.append("(" + " & ".join(last) + ")")
    return (" & ".join(parts), needs_check) if parts else None
