"""The cyclic garbage collector during a replay of the log (rebuild, its reader, verify).

A replay allocates a few container objects per event (the decoded event, its message, the
rows built from it) and keeps some of them for the whole replay (the folded session states).
CPython's automatic collector runs a young collection every 700 allocations and promotes
what survives it through the older generations, so with every batch alive while it is
projected it traversed each batch several times and, ever more often as the states grew,
every state folded so far: about a third of the reader process's CPU time at 300,000
messages (bench/README.md, big_store, "Rebuild: the collector and the index merges").

Reference counting frees a replay's objects as soon as a batch is done (a replay makes no
reference cycles: a full collection after 300,000 events found none). Inside
``replay_collection`` the automatic collector is off; the ``tick`` it yields, called once a
batch, runs a young collection every ``COLLECT_EVERY`` batches, so a cycle made anyway is
still collected, and what survives it is never traversed again during the replay.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

COLLECT_EVERY = 20
"""Batches between two young collections (100,000 events at the replay's batch size)."""


@contextmanager
def replay_collection() -> Iterator[Callable[[], None]]:
    """The automatic collector off inside the block (as it was again after it); yields the
    ``tick`` to call once a batch."""
    was_enabled = gc.isenabled()
    batches = 0

    def tick() -> None:
        nonlocal batches
        batches += 1
        if batches % COLLECT_EVERY == 0:
            gc.collect(0)

    gc.disable()
    try:
        yield tick
    finally:
        if was_enabled:
            gc.enable()
