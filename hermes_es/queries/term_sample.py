"""The newest matches of each term of a several-term query, on a big index: what they tell.

FTS5 intersects terms by walking the rarest one and seeking every other term to each of its
row ids, in every index segment: ~7-13 µs a row of the rarest term on a 15-segment index of
2,900,000 messages, so ``the velpharengon`` (2,342 matches of ``velpharengon``) costs ~25 ms
before a row is scored, and a pair of two words with 100,000 matches each would cost seconds.
FTS5's ``bm25()`` also counts every match of every term (~45-80 ns a match) before it scores.

So on an index of more than ``BIG_INDEX`` rows each term's newest ``SAMPLE`` matches are read
first (a short doclist walk, ~0.3-0.5 ms each). They give

* each term's match count: exact below ``SAMPLE``, else estimated from the share of row ids its
  newest ``SAMPLE`` span (message row ids grow with the log position) -- the idf the window plan
  uses for that term;
* a floor: when every term has at least ``SAMPLE`` matches, the window plan's first page reads
  only row ids from the oldest of the rarest term's newest ``SAMPLE`` matches up, so the walk
  seeks at most ``SAMPLE`` rows of it (docs/search.md, "Ranking rule").

Smaller indexes are never sampled: there every count and walk is cheap and exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import apsw

BIG_INDEX = 200_000
"""Indexed rows above which several-term queries are sampled (none at or below)."""
SAMPLE = 2000
"""Newest matches of each term read: the estimate's sample and the walk's bound."""

_NEWEST = (
    "SELECT count(*), min(rowid) FROM (SELECT rowid FROM messages_fts"
    " WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT {size})"
)
_SPAN = (
    "SELECT (SELECT min(id) FROM messages_fts_docsize), (SELECT max(id) FROM messages_fts_docsize)"
)
_AVERAGES = "SELECT block FROM messages_fts_data WHERE id = 1"


def _varints(blob: bytes, count: int) -> list[int]:
    """The first ``count`` SQLite varints of ``blob`` (fewer when it ends first)."""
    values: list[int] = []
    i = 0
    while len(values) < count and i < len(blob):
        value = 0
        for k in range(9):
            if i >= len(blob):
                return values
            byte = blob[i]
            i += 1
            if k == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        values.append(value)
    return values


def _averages(conn: apsw.Connection, count: int) -> list[int]:
    found = conn.execute(_AVERAGES).fetchall()
    if not found or not isinstance(found[0][0], bytes):
        return []
    return _varints(found[0][0], count)


def indexed_rows(conn: apsw.Connection) -> int | None:
    """How many rows the index holds, from FTS5's averages record (None: can't tell).

    The record (``messages_fts_data`` row 1) starts with the row count as an SQLite varint;
    reading it costs one row look-up, where ``count(*)`` reads every page of the index.
    """
    values = _averages(conn, 1)
    return values[0] if values else None


def index_totals(conn: apsw.Connection) -> tuple[int, int]:
    """(rows, tokens) the index holds: the averages record's row count and the token total of
    its one column, what FTS5's ``xRowCount`` and ``xColumnTotalSize`` return ((0, 0): empty)."""
    values = _averages(conn, 2)
    return (values[0], values[1]) if len(values) == 2 else (0, 0)


class TermSamples:
    """Per term (in query order): matches among its newest ``size``, their oldest row id."""

    def __init__(
        self,
        rows: int,
        size: int,
        found: list[tuple[int, int]],
        span: tuple[int, int],
    ) -> None:
        self.rows = rows
        self.size = size
        self.found = found
        low, high = span
        self.low, self.high = low, high
        self.estimates = [self._estimate(n, oldest, low, high) for n, oldest in found]
        """Each term's match count: exact when below ``size``, else estimated."""
        full = all(n >= size for n, _ in found)
        self.floor: int | None = min(oldest for _, oldest in found) if full and found else None
        """The oldest of the rarest term's newest ``size`` matches (None: some term has
        fewer, so a walk of the whole intersection already reads at most ``size`` of its)."""

    def next_floor(self, below: int, step: int) -> int:
        """The floor of the page after the one whose floor was ``below``: a span of row ids
        ``8 ** step`` times as wide as the first page's (about that many times the rarest
        term's matches, without counting them), never below the index's lowest row id."""
        width = (self.high - self.floor + 1) * 8**step if self.floor is not None else 0
        return max(self.low, below - width)

    def _estimate(self, found: int, oldest: int, low: int, high: int) -> float:
        if found < self.size:
            return float(found)
        share = (high - oldest + 1) / max(high - low + 1, 1)
        return min(float(self.rows), found / max(share, 1e-12))


def sample_terms(
    conn: apsw.Connection, exprs: Sequence[str], size: int = SAMPLE, big: int = BIG_INDEX
) -> TermSamples | None:
    """Samples of each FTS5 expression in ``exprs`` (None: a small index, or one term)."""
    if len(exprs) < 2:
        return None
    rows = indexed_rows(conn)
    if rows is None or rows <= big:
        return None
    found: list[tuple[int, int]] = []
    for expr in exprs:
        n, oldest = conn.execute(_NEWEST.format(size=int(size)), (expr,)).fetchone()
        found.append((int(n), int(oldest) if oldest is not None else 0))
    low, high = conn.execute(_SPAN).fetchone()
    if low is None or high is None:
        return None
    return TermSamples(rows, size, found, (int(low), int(high)))
