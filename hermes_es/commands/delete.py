"""Physical delete: events, projection rows and index entries go; a content-free receipt stays.

A verified delete names the display version it exported for the session and for every delegate
it cascades to; inside the delete transaction those versions, and the set of delegates, are
compared with the current ones (one integer per stream). Any difference refuses the delete and
names what changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import msgspec

from hermes_es import events as ev
from hermes_es.commands.create_claims import claim_of_session
from hermes_es.commands.unit_of_work import Batch, Store
from hermes_es.errors import InvariantError, SessionNotFoundError
from hermes_es.projections.purge import indexed_messages, prefer_optimize, purging
from hermes_es.queries import lookup


class DeleteRefusedError(InvariantError):
    """A verified delete found that the session or its delegates changed since the export."""

    def __init__(self, message: str, *, subject: str, changes: list[str]) -> None:
        super().__init__(message, subject=subject)
        self.changes = changes


class Deleted(msgspec.Struct, frozen=True, kw_only=True):
    """What one deleted stream left behind: its receipt's numbers."""

    session_id: str
    events: int
    messages: int
    digest: str
    scrubbed: bool = True
    """False when another process's open read kept the WAL from being truncated: the delete
    committed, but old page images stay on disk until that process lets go (the next delete,
    optimize or checkpoint finishes the job)."""


def delegate_tree(batch: Batch, session_id: str) -> list[str]:
    """Every delegate (subagent) session below ``session_id``, depth first."""
    out: list[str] = []
    stack = [session_id]
    while stack:
        parent = stack.pop()
        for child in lookup.delegates_of(batch.conn, parent):
            if child not in out and child != session_id:
                out.append(child)
                stack.append(child)
    return out


def display_digest(batch: Batch, session_id: str) -> str:
    """SHA-256 over the display transcript (role, seq and text of each shown message)."""
    digest = hashlib.sha256()
    for seq, role, content in lookup.display_rows(batch.conn, session_id):
        digest.update(f"{seq}\x1f{role}\x1f{content}\x1e".encode())
    return digest.hexdigest()


def _check_expected(
    batch: Batch, session_id: str, delegates: list[str], expected: Mapping[str, int]
) -> None:
    changes: list[str] = []
    wanted = set(expected) - {session_id}
    current = set(delegates)
    for sid in sorted(current - wanted):
        changes.append(f"delegate {sid} was added")
    for sid in sorted(wanted - current):
        changes.append(f"delegate {sid} is gone")
    for sid in [session_id, *sorted(current & wanted)]:
        state = batch.load(sid)
        want = expected.get(sid)
        if want is None:
            changes.append(f"{sid} was not exported")
        elif state.display_version != want:
            changes.append(
                f"{sid} changed after the export (display version {want} → {state.display_version})"
            )
    if changes:
        raise DeleteRefusedError(
            "delete refused, nothing was deleted: " + "; ".join(changes),
            subject=session_id,
            changes=changes,
        )


def _remove(batch: Batch, store: Store, session_id: str, reason: str, actor: str) -> Deleted:
    state = batch.load(session_id)
    digest = display_digest(batch, session_id)
    claim = claim_of_session(batch.conn, session_id)
    store.projections.forget(batch.conn, session_id)
    events = store.recorder._delete_events(batch.conn, session_id)
    if claim:  # the claim of its create id (commands/create_claims.py) names it: it goes too
        store.recorder._delete_events(batch.conn, claim)
    batch.states.pop(session_id, None)
    receipt = ev.SessionDeleted(
        at=batch.now,
        actor=actor,
        session_id=session_id,
        events=events,
        messages=state.message_count,
        digest=digest,
        reason=reason,
    )
    batch.record_other(f"receipt:{session_id}", [receipt])
    return Deleted(
        session_id=session_id, events=events, messages=state.message_count, digest=digest
    )


def _optimize(batch: Batch, targets: Sequence[str]) -> bool:
    deleted = sum(batch.load(sid).message_count for sid in targets)
    return prefer_optimize(deleted, indexed_messages(batch.conn))


def delete_session(
    store: Store,
    session_id: str,
    *,
    reason: str = "delete",
    actor: str = "",
    expected: Mapping[str, int] | None = None,
    cascade: bool = True,
    scrub: bool = True,
) -> list[Deleted]:
    """Physically delete a session (and, with ``cascade``, its delegates) in one transaction.

    ``expected`` maps the session and each delegate to the display version that was exported;
    when given, the delete is refused unless all of them (and the delegate set) are unchanged.
    ``scrub`` checkpoints and truncates the WAL afterwards so no deleted text stays on disk.
    """
    with store.transaction() as batch:
        if batch.load(session_id).version == 0:
            raise SessionNotFoundError(
                f"no session {session_id!r}; run 'hermes sessions list' to see sessions",
                subject=session_id,
            )
        delegates = delegate_tree(batch, session_id) if cascade else []
        if expected is not None:
            _check_expected(batch, session_id, delegates, expected)
        targets = [*reversed(delegates), session_id]
        with purging(batch.conn, optimize=_optimize(batch, targets)):
            done = [_remove(batch, store, sid, reason, actor) for sid in targets]
        drop_unreferenced_prompts(batch, store)
    return _scrubbed(store, done) if scrub else done


def drop_unreferenced_prompts(batch: Batch, store: Store) -> list[str]:
    """Erase stored prompts that no remaining session sends.

    A stored prompt embeds the profile's memory blocks (MEMORY.md, USER.md) as they were, so
    it is conversation-adjacent text: when the last session using it goes, it goes too.
    """
    gone = store.projections.drop_unreferenced_prompts(batch.conn)
    for sha in gone:
        store.recorder._delete_events(batch.conn, f"prompt:{sha}")
    return gone


def _scrubbed(store: Store, done: list[Deleted]) -> list[Deleted]:
    if not done or scrub_wal(store):
        return done
    return [msgspec.structs.replace(d, scrubbed=False) for d in done]


def delete_many(
    store: Store, session_ids: Sequence[str], *, reason: str, actor: str = "", scrub: bool = True
) -> list[Deleted]:
    """Delete several sessions (with their delegates) in one transaction, then scrub once."""
    with store.transaction() as batch:
        targets: list[str] = []
        for sid in session_ids:
            if sid in targets or batch.load(sid).version == 0:
                continue
            for target in [*reversed(delegate_tree(batch, sid)), sid]:
                if target not in targets:
                    targets.append(target)
        with purging(batch.conn, optimize=_optimize(batch, targets)):
            done = [_remove(batch, store, sid, reason, actor) for sid in targets]
        drop_unreferenced_prompts(batch, store)
    return _scrubbed(store, done) if scrub else done


SCRUB_WAIT_MS = 2_000
"""How long the post-delete checkpoint waits for readers before reporting it is pending."""


def scrub_wal(store: Store) -> bool:
    """Rewrite the file and truncate the WAL so no deleted text stays on disk.

    Returns False when another process's read snapshot kept the WAL from being truncated (the
    delete itself has committed): the scrub is then recorded as pending (``doctor`` reports
    it) and a background process finishes it as soon as that reader lets go.
    """
    own = getattr(store, "scrub_after_delete", None)
    if own is not None:  # a server store vacuums the touched tables instead (PostgreSQL)
        return bool(own())
    import apsw

    from hermes_es.store.scrub import scrub, start_finisher

    conn = store.connection()
    if not isinstance(conn, apsw.Connection):
        return True  # not a SQLite file, and the store has no scrub of its own
    done = scrub(conn, store.path, reason="delete", wait_ms=SCRUB_WAIT_MS)
    if not done:
        start_finisher(store.path)
    return done
