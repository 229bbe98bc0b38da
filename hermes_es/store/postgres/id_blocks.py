"""Id-block lexemes: an id range the GIN index of ``messages_fts.tsv`` answers by itself.

A GIN index returns the rows holding a lexeme in heap order and cannot be told to look at an
id range only: the bitmap of a word in 3% of 1,000,000 rows reads all 30,000 postings even
when the newest 2,600 are all that is wanted. So every row's ``tsvector`` also holds one lexeme
per level naming the aligned block of ids it falls in (``'§ 0.976'``: level 0, block
``id >> BLOCK_SHIFTS[0]`` = 976), and a search of the newest matches adds a second condition on
the same index, ``tsv @@ '§ 0.976' | '§ 0.977' | …``, for the blocks of its id range.

Two conditions on one GIN index are two scan keys, and the index intersects scan keys by
leaping: each key's posting list is advanced past the other's current row, descending its
posting tree instead of reading what lies between. Rows arrive in id order, so a block's rows
sit together in the heap: the word's postings older than the range are skipped, and the
bitmap costs the postings inside the range (a synthetic table of 1,000,000 rows, a lexeme in
3% of them: the GIN bitmap of every match 13-38 ms, of the matches among the newest 82,000
rows 1.5-1.8 ms). Within one ``tsquery``
(``q & blocks``) the index reads every posting of the blocks instead: the blocks are a
separate condition.

The levels: blocks of 1,024, 16,384 and 262,144 log positions (a message row id is its
event's position times 4,096 plus its index in the event), so a range is covered by a few
dozen lexemes at most. No token holds ``§`` or a space, and every pair lexeme has a token
right after its ``§``, so no word, pair or prefix query matches a block lexeme; ranking is
``ts_rank`` without length normalization, which lexemes outside the query do not change.
"""

from __future__ import annotations

BLOCK_SHIFTS: tuple[int, ...] = (22, 26, 30)
"""Bits of a row id below each level's block number (finest first)."""
MARK = "\u00a7 "
"""Starts every block lexeme (``§`` and a space)."""


def lexemes(row_id: int) -> list[str]:
    """The block lexemes of one row id, one per level."""
    return [f"{MARK}{level}.{row_id >> shift}" for level, shift in enumerate(BLOCK_SHIFTS)]


def literal(row_id: int) -> str:
    """The block lexemes of ``row_id`` as ``tsvector`` input (appended to a row's tokens)."""
    return " ".join(f"'{lexeme}'" for lexeme in lexemes(row_id))


def cover(lo: int, hi: int) -> tuple[str, int]:
    """The ``tsquery`` of the blocks covering ids ``lo..hi``, and the lowest id they cover
    (``lo`` or below: the range starts on a block boundary, of a level coarse enough that
    the range takes few lexemes: a block at most a quarter of the range)."""
    sizes = [1 << shift for shift in BLOCK_SHIFTS]
    unit = sizes[0]
    for size in sizes:
        if size * 4 <= hi - lo + 1:
            unit = size
    start = lo - lo % unit
    end = (hi // sizes[0] + 1) * sizes[0]  # exclusive, on a finest-block boundary
    parts: list[str] = []
    at = start
    while at < end:
        for level in range(len(sizes) - 1, -1, -1):
            size = sizes[level]
            if at % size == 0 and at + size <= end:
                parts.append(f"'{MARK}{level}.{at >> BLOCK_SHIFTS[level]}'")
                at += size
                break
    return " | ".join(parts), start
