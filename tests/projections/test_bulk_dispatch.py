"""Per-event projector dispatch by ``applies_to``, and the rebuild's straight log decode."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from hermes_es import events as ev
from hermes_es.aggregates.state import SessionState
from hermes_es.commands.engine import SessionEngine
from hermes_es.projections.base import Change
from hermes_es.projections.catalog import ProjectionSet
from hermes_es.projections.rebuild import _changes
from hermes_es.store.decoding import CorruptEventError

pytestmark = pytest.mark.sqlite_only


class _Recorder:
    """A projector with a per-event ``apply`` that notes every event type it is given."""

    def __init__(self, name: str, applies_to: tuple[type, ...] | None) -> None:
        self.name = name
        if applies_to is not None:
            self.applies_to = applies_to
        self.seen: list[type] = []

    def schema(self) -> list[str]:
        return []

    def indexes(self) -> list[str]:
        return []

    def tables(self) -> list[str]:
        return []

    def apply(self, conn: apsw.Connection, change: Change) -> None:
        self.seen.append(type(change.event))

    def settle(self, conn: apsw.Connection, states: dict[str, SessionState]) -> None:
        pass

    def forget(self, conn: apsw.Connection, session_id: str) -> None:
        pass


class _Set(ProjectionSet):
    def make_projectors(self, prefix: str, *, bulk: bool) -> list[object]:  # type: ignore[override]
        return [*super().make_projectors(prefix, bulk=bulk), _Recorder("all", None),
                _Recorder("starts", (ev.SessionStarted,))]  # fmt: skip


def test_apply_calls_a_projector_only_for_the_events_it_declares(tmp_path: Path) -> None:
    """A projector with ``applies_to`` sees only those events; one without sees every event,
    in log order."""
    engine = SessionEngine(tmp_path / "state.db")
    sid = engine.start_session("cli", cwd="")
    engine.append_message(sid, "user", "hello")
    engine.append_message(sid, "assistant", "hi")
    conn = engine.store.connection()
    rows = conn.execute(
        "SELECT id, originator_id, originator_version, topic, state FROM events ORDER BY id"
    ).fetchall()
    changes = _changes(rows)
    pset = _Set("probe_", bulk=True)  # fresh tables beside the live ones
    everything, starts = pset.projectors[-2], pset.projectors[-1]
    with conn:
        pset.create(conn, with_indexes=False)
        pset.apply(conn, changes, {})
    kinds = [type(c.event) for c in changes]
    assert everything.seen == kinds  # type: ignore[attr-defined]
    assert starts.seen == [ev.SessionStarted]  # type: ignore[attr-defined]
    assert ev.MessageAppended in kinds
    engine.close()


def test_the_straight_decode_equals_decode_row_and_still_names_a_bad_row(tmp_path: Path) -> None:
    """The rebuild's batch decode gives the events ``decode_row`` gives; a batch holding a row
    that does not decode raises ``CorruptEventError`` naming that row's position."""
    engine = SessionEngine(tmp_path / "state.db")
    sid = engine.start_session("cli", cwd="")
    engine.append_message(sid, "user", "hello")
    rows = (
        engine.store.connection()
        .execute(
            "SELECT id, originator_id, originator_version, topic, state FROM events ORDER BY id"
        )
        .fetchall()
    )
    engine.close()
    good = _changes(rows)
    assert [c.position for c in good] == [r[0] for r in rows]
    assert isinstance(good[-1].event, ev.MessageAppended)
    assert good[-1].event.message.content == "hello"
    broken = [*rows[:-1], (*rows[-1][:4], b"\xc1\x01not a frame")]
    with pytest.raises(CorruptEventError) as caught:
        _changes(broken)
    assert caught.value.position == rows[-1][0]
    assert caught.value.stream == sid
