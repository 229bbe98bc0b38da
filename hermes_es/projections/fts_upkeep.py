"""Keeping a live full-text index in few segments: a bounded FTS5 merge step after each write.

FTS5 writes each transaction's rows as a new segment and merges a level's segments only every
64 leaf pages written (its ``automerge`` work unit) or when a level holds 16 (``crisismerge``),
so a store written one message a transaction keeps 10-30 segments, and every term of every
search reads each of them: at 100,000 messages 28 segments against 8 for the same rows
written in bulk, an identifier's prefix look-up 0.06 ms against 0.02, the walk of a rare word
through a frequent one (``of opquiban``) 0.37 ms against 0.17 (``bench/README.md``, "Search:
one-word windows in C, merged live index"). ``merge_step`` runs FTS5's ``'merge'`` with a small
positive page count after the rows of a write are added, in the same transaction: FTS5 merges
the level holding the most segments once it holds ``usermerge`` of them, about ``PAGES`` leaf
pages a call (a merge too big for one call resumes at the next), and does nothing otherwise.
The rows, the index's content and every search result are unchanged; only the segment layout
is. A replay filling an index from nothing (a rebuild) leaves its merging to its own end
(``fts.FILL_OPTIONS``) and runs no step.
"""

from __future__ import annotations

import apsw

PAGES = 16
"""Leaf pages (4 KiB each) one step merges at most."""
USERMERGE = 4
"""FTS5's ``usermerge``: segments a level must hold for a step to merge them (FTS5's default)."""


def merge_step(conn: apsw.Connection, table: str) -> None:
    """One bounded merge step of ``table`` (an FTS5 table), inside the caller's transaction."""
    conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('merge', {PAGES})")
