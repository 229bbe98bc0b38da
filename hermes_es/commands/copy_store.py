"""Copying a store to another backend (SQLite → PostgreSQL and back), every event in log order.

The target gets every event of the source with its stream, version, topic and payload bytes,
in the source's log order, in batches: each batch is one target transaction that inserts the
events and applies every projection, and records in the target's ``tracking`` table how far the
copy has come (``copy-store:<source>``). A copy killed at any point is resumed by running it
again: it continues after the last committed batch. A target that holds events of anything
but this copy is refused. The digest (SHA-256 over every event's stream, version, topic and
payload, in log order; the payload is the event's msgpack, however a backend compresses it)
of the source and of the target are equal when the copy is complete.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from hermes_es.errors import ValidationError
from hermes_es.store.backend import StoreBackend
from hermes_es.store.codec import unpack

BATCH = 500
"""Events per target transaction (``$HERMES_COPY_BATCH`` overrides, for tests)."""

Progress = Callable[[int, int], None]
EventRow = tuple[int, str, int, str, bytes]


class Copied(msgspec.Struct, frozen=True, kw_only=True):
    """What ``copy-store`` did."""

    source: str
    target: str
    events: int
    """Events in the source (all of them are now in the target)."""
    copied: int
    """Events this run copied (fewer than ``events`` when it resumed an earlier run)."""
    digest: str
    target_digest: str


def _rows(conn: Any, after: int, limit: int) -> list[EventRow]:
    rows = conn.execute(
        "SELECT id, originator_id, originator_version, topic, state FROM events"
        " WHERE id > ? ORDER BY id LIMIT ?",
        (after, limit),
    ).fetchall()
    return [(int(r[0]), str(r[1]), int(r[2]), str(r[3]), bytes(r[4])) for r in rows]


def _all(conn: Any, batch: int) -> Iterator[EventRow]:
    last = 0
    while True:
        rows = _rows(conn, last, batch)
        if not rows:
            return
        yield from rows
        last = rows[-1][0]


def log_digest(conn: Any) -> tuple[int, str]:
    """(events, SHA-256) over every event's stream, version, topic and bytes, in log order."""
    digest = hashlib.sha256()
    count = 0
    for _, stream, version, topic, state in _all(conn, 5000):
        payload = unpack(state)
        digest.update(f"{stream}\x1f{version}\x1f{topic}\x1f{len(payload)}\x1f".encode())
        digest.update(payload)
        count += 1
    return count, digest.hexdigest()


def _count(conn: Any) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM events").fetchall()[0][0])


def _position(conn: Any, name: str) -> int | None:
    rows = conn.execute(
        "SELECT notification_id FROM tracking WHERE application_name = ?", (name,)
    ).fetchall()
    return int(rows[0][0]) if rows else None


def copy_store(
    source: StoreBackend,
    target: StoreBackend,
    progress: Progress | None = None,
    *,
    bulk: bool = False,
) -> Copied:
    """Copy (or finish copying) every event of ``source`` into ``target``.

    ``bulk``: into an empty PostgreSQL target, in one transaction with ``COPY`` and the
    projections built once at the end (``store/postgres/bulk.py``); much faster for a big
    store, not resumable (a killed bulk copy leaves the target empty: start it again).
    """
    if bulk and target.kind != "postgresql":
        raise ValidationError(
            f"--bulk copies into a PostgreSQL store; {target.location} is {target.kind}",
            subject=target.location,
        )
    if source.location == target.location:
        raise ValidationError(
            f"source and target are the same store ({source.location})", subject=source.location
        )
    source.require()
    batch_size = int(os.environ.get("HERMES_COPY_BATCH", BATCH))
    src = source.store()
    try:
        dst = target.store()
        try:
            if bulk:
                return _bulk(source, target, src, dst, progress)
            return _copy(source, target, src, dst, batch_size, progress)
        finally:
            dst.close()
    finally:
        src.close()


def _tracking_name(source: StoreBackend) -> str:
    return "copy-store:" + hashlib.sha256(source.location.encode()).hexdigest()[:16]


def _bulk(
    source: StoreBackend, target: StoreBackend, src: Any, dst: Any, progress: Progress | None
) -> Copied:
    sconn, tconn = src.connection(), dst.connection()
    total = _count(sconn)
    copied = dst.bulk_load(
        _all(sconn, 5000), total, tracking_name=_tracking_name(source), progress=progress
    )
    return _copied(source, target, sconn, tconn, copied)


def _copy(
    source: StoreBackend,
    target: StoreBackend,
    src: Any,
    dst: Any,
    batch_size: int,
    progress: Progress | None,
) -> Copied:
    name = _tracking_name(source)
    sconn, tconn = src.connection(), dst.connection()
    done = _position(tconn, name)
    if done is None and _count(tconn) > 0:
        raise ValidationError(
            f"target {target.location} already holds {_count(tconn)} events that are not a copy"
            f" of {source.location}; copy-store fills only an empty store (or resumes its own"
            " copy)",
            subject=target.location,
        )
    last = done or 0
    total = _count(sconn)
    copied_before = int(
        sconn.execute("SELECT COUNT(*) FROM events WHERE id <= ?", (last,)).fetchall()[0][0]
    )
    copied = 0
    while True:
        rows = _rows(sconn, last, batch_size)
        if not rows:
            break
        with dst.transaction() as batch:
            for _, stream, version, topic, state in rows:
                batch.replay(stream, version, topic, unpack(state))
            batch.flush()
            last = rows[-1][0]
            batch.conn.execute(
                "INSERT INTO tracking (application_name, notification_id) VALUES (?, ?)"
                " ON CONFLICT (application_name) DO UPDATE"
                " SET notification_id = excluded.notification_id",
                (name, last),
            )
        copied += len(rows)
        if progress:
            progress(copied_before + copied, max(total, copied_before + copied))
    return _copied(source, target, sconn, tconn, copied)


def _copied(
    source: StoreBackend, target: StoreBackend, sconn: Any, tconn: Any, copied: int
) -> Copied:
    """What a copy did, with the digests of both logs as they are now."""
    events, digest = log_digest(sconn)
    _, target_digest = log_digest(tconn)
    return Copied(
        source=source.location,
        target=target.location,
        events=events,
        copied=copied,
        digest=digest,
        target_digest=target_digest,
    )
