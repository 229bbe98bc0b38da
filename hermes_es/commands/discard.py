"""Discarding a session nobody used: a chat opened and left before its first message.

Such a session holds nothing but its start (and end/resume) events: no message, no title, no
continuation, no delegate. Discarding removes its events and projection rows (and the claim
of its create id, if any) in one transaction and leaves no receipt (there is no content to
account for), so ``hermes sessions list`` never fills up with empty rows from chats that were
opened and closed.
"""

from __future__ import annotations

from hermes_es.commands.create_claims import claim_of_session
from hermes_es.commands.unit_of_work import Store
from hermes_es.queries import lookup


def discard_if_unused(store: Store, session_id: str) -> bool:
    """Remove ``session_id`` when nothing was ever recorded in it; True when it went.

    A session with a message (even rewound or compacted), a title, a continuation or a
    delegate is kept, as is one that is already gone.
    """
    with store.transaction() as batch:
        state = batch.load(session_id)
        if (
            not state.version
            or state.next_seq
            or state.title
            or state.continued_into
            or lookup.delegates_of(batch.conn, session_id)
        ):
            return False
        claim = claim_of_session(batch.conn, session_id)
        store.projections.forget(batch.conn, session_id)
        store.recorder._delete_events(batch.conn, session_id)
        if claim:  # its create id's claim goes with it (a retry then makes a new session)
            store.recorder._delete_events(batch.conn, claim)
        batch.states.pop(session_id, None)
        return True
