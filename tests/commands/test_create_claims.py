"""Create claims: a session made with a client's create id is made once (both backends)."""

from __future__ import annotations

import pytest

from hermes_es.commands.create_claims import (
    CreateClaimedError,
    claim_of,
    claim_of_session,
    claim_stream,
)
from hermes_es.commands.delete import delete_session
from hermes_es.commands.discard import discard_if_unused
from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import ValidationError
from hermes_es.queries.listing import list_sessions
from hermes_es.queries.turns import events_since


def _ids(engine: SessionEngine) -> list[str]:
    return [r.id for r in list_sessions(engine.store.connection(), limit=50)]


def _claim_events(engine: SessionEngine, create_id: str) -> int:
    return len(events_since(engine.store.connection(), claim_stream(create_id), 0))


def test_second_creation_with_one_create_id_is_refused_and_stores_nothing(
    engine: SessionEngine,
) -> None:
    """The first creation with a create id stores the session and its claim (naming the
    session and the actor); a second one with that id raises CreateClaimedError and adds no
    session; another id makes another session."""
    sid = engine.start_session("cli", create_id="c-1", cwd="/tmp")
    assert claim_of(engine.store.connection(), "c-1") == (sid, "test")
    assert claim_of_session(engine.store.connection(), sid) == claim_stream("c-1")
    before = _ids(engine)
    with pytest.raises(CreateClaimedError, match="c-1"):
        engine.start_session("cli", create_id="c-1", cwd="/tmp")
    assert _ids(engine) == before
    assert _claim_events(engine, "c-1") == 1
    other = engine.start_session("cli", create_id="c-2", cwd="/tmp")
    assert other != sid and claim_of(engine.store.connection(), "c-2") == (other, "test")
    assert claim_of(engine.store.connection(), "never-used") is None
    plain = engine.start_session("cli", cwd="/tmp")
    assert claim_of_session(engine.store.connection(), plain) == ""


@pytest.mark.parametrize("bad", ["", "has space", "x" * 129, "colon:id", "é"])
def test_malformed_create_id_is_refused_naming_the_field(engine: SessionEngine, bad: str) -> None:
    """A create id outside 1-128 of ``[A-Za-z0-9._-]`` is a ValidationError at $.create_id
    and no session is made (the empty id means no claim, so it is tested through the check)."""
    from hermes_es.commands.create_claims import check_create_id

    with pytest.raises(ValidationError, match=r"at \$\.create_id"):
        check_create_id(bad)
    if bad:
        with pytest.raises(ValidationError, match=r"at \$\.create_id"):
            engine.start_session("cli", create_id=bad, cwd="/tmp")
        assert _ids(engine) == []


def test_delete_and_discard_remove_the_claim_with_the_session(engine: SessionEngine) -> None:
    """A physical delete and a discard of an unused session remove the claim of its create
    id in the same transaction; the id then makes a new session."""
    used = engine.start_session("cli", create_id="del-1", cwd="/tmp")
    engine.append_message(used, "user", "something said")
    delete_session(engine.store, used)
    assert _claim_events(engine, "del-1") == 0
    unused = engine.start_session("cli", create_id="dis-1", cwd="/tmp")
    assert discard_if_unused(engine.store, unused)
    assert _claim_events(engine, "dis-1") == 0
    again = engine.start_session("cli", create_id="dis-1", cwd="/tmp")
    assert again != unused and claim_of(engine.store.connection(), "dis-1") == (again, "test")
