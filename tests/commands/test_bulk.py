"""The bulk write path: units grouped into few transactions, a failed unit rolled back alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_es import events as ev
from hermes_es.aggregates import session as agg
from hermes_es.commands.bulk import GroupedUnits
from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import ValidationError
from hermes_es.projections.rebuild import verify


def _session(units: GroupedUnits, sid: str, texts: list[str], *, fail: bool = False) -> None:
    with units.unit(len(texts)) as batch:
        state = batch.record(sid, agg.start(sid, at=1.0, source="cli", cwd=""))
        drafts = [ev.Message(seq=-1, uid="", role="user", content=t) for t in texts]
        batch.record(sid, agg.append(state, drafts, at=2.0))
        if fail:
            raise ValidationError(f"unit {sid} refused")


def _commits(engine: SessionEngine) -> list[int]:
    conn = engine.store.connection()
    return [r[0] for r in conn.execute("SELECT COUNT(*) FROM sessions")]


def test_a_failed_unit_is_rolled_back_alone_and_the_group_commits(tmp_path: Path) -> None:
    """Units before and after a failing one are stored; the failing one leaves no row or event."""
    with SessionEngine.open(tmp_path) as engine:
        with GroupedUnits(engine.store, max_messages=100) as units:
            _session(units, "s1", ["one", "two"])
            with pytest.raises(ValidationError, match="unit s2 refused"):
                _session(units, "s2", ["BAD-UNIT-TEXT"], fail=True)
            _session(units, "s3", ["three"])
            units.commit_if_due()  # not due: 3 messages < 100
            assert units.committed_units == 0
        assert units.committed_units == 2
        conn = engine.store.connection()
        assert [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY id")] == ["s1", "s3"]
        assert (
            conn.execute("SELECT COUNT(*) FROM events WHERE originator_id = 's2'").fetchall()[0][0]
            == 0
        )
        assert [h.session_id for h in engine.search("three")] == ["s3"]
        assert engine.search("BAD-UNIT-TEXT") == []
    assert all(d.equal for d in verify(tmp_path / "state.db"))


def test_a_full_group_commits_and_the_next_unit_opens_a_new_transaction(tmp_path: Path) -> None:
    """commit_if_due commits once the group holds max_messages; later units go on."""
    with SessionEngine.open(tmp_path) as engine:
        units = GroupedUnits(engine.store, max_messages=3)
        with units:
            _session(units, "a", ["1", "2"])
            units.commit_if_due()
            assert units.committed_units == 0
            _session(units, "b", ["3"])
            units.commit_if_due()
            assert units.committed_units == 2
            # Committed: another connection sees both sessions now.
            with SessionEngine.open(tmp_path) as other:
                assert _commits(other) == [2]
            _session(units, "c", ["4"])
        assert units.committed_units == 3


def test_an_error_outside_a_unit_abandons_the_open_group(tmp_path: Path) -> None:
    """An exception leaving the ``with`` rolls back the uncommitted group, not committed ones."""
    with SessionEngine.open(tmp_path) as engine:
        units = GroupedUnits(engine.store, max_messages=2)
        with pytest.raises(RuntimeError, match="stop"), units:
            _session(units, "kept", ["1", "2"])
            units.commit_if_due()
            _session(units, "lost", ["3"])
            raise RuntimeError("stop")
        conn = engine.store.connection()
        assert [r[0] for r in conn.execute("SELECT id FROM sessions")] == ["kept"]


def _fts_options(path: Path) -> dict[str, object]:
    from hermes_es.projections.catalog import connect

    conn = connect(path)
    try:
        return {str(k): v for k, v in conn.execute("SELECT k, v FROM messages_fts_config")}
    finally:
        conn.close()


def _one_segment(path: Path) -> bool:
    """True when a merge of every segment of the index finds nothing to do."""
    from hermes_es.projections.catalog import connect
    from hermes_es.projections.fts import merge_step

    conn = connect(path)
    try:
        with conn:
            return not merge_step(conn, "messages_fts")
    finally:
        conn.close()


@pytest.mark.sqlite_only  # the SQLite store's FTS5 index
def test_groups_into_an_empty_store_fill_the_index_then_merge_it(tmp_path: Path) -> None:
    """Into a store with no session the groups merge no segment as they go; what a committed
    group leaves has FTS5's default options (a killed run leaves no fill options), and at the
    end the index is one segment, searchable, matching the log."""
    from hermes_es.projections.fts import LIVE_OPTIONS

    db = tmp_path / "state.db"
    with SessionEngine.open(tmp_path) as engine:
        with GroupedUnits(engine.store, max_messages=2) as units:
            for k in range(12):
                _session(units, f"s{k}", [f"wombat{k} text", f"second {k} words"])
                units.commit_if_due()
                if k == 5:
                    options = _fts_options(db)
                    assert {key: options[key] for key, _ in LIVE_OPTIONS} == dict(LIVE_OPTIONS)
                    assert not _one_segment(db)  # several groups, several segments so far
        assert units.committed_units == 12
        assert _one_segment(db)
        options = _fts_options(db)
        assert {key: options[key] for key, _ in LIVE_OPTIONS} == dict(LIVE_OPTIONS)
        assert [h.session_id for h in engine.search("wombat7")] == ["s7"]
        assert len(engine.search("second", limit=50)) == 12
    assert all(d.equal for d in verify(db))


@pytest.mark.sqlite_only
def test_groups_into_a_store_with_sessions_leave_its_index_segments(tmp_path: Path) -> None:
    """A store that already holds sessions is written as always: its index is not merged
    into one segment at the end (that would rewrite an index of any size)."""
    db = tmp_path / "state.db"
    with SessionEngine.open(tmp_path) as engine:
        for k in range(3):
            with GroupedUnits(engine.store) as units:
                _session(units, f"old{k}", [f"existing {k}"])
        assert not _one_segment(db)
        with GroupedUnits(engine.store, max_messages=2) as units:
            for k in range(4):
                _session(units, f"s{k}", [f"new {k} text", "more"])
                units.commit_if_due()
        assert not _one_segment(db)
        assert len(engine.search("new", limit=50)) == 4
    assert all(d.equal for d in verify(db))
