"""Tests for the refresh-prompts and repair-prompts use cases over a store built by the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.commands.prompting import repin_tools_on_resume
from hermes_es.commands.prompts_admin import apply_repairs, refresh_prompts, scan_prompts
from hermes_es.errors import SessionNotFoundError
from hermes_es.prompts.sources import SKILL_SAFETY_HEADING
from hermes_es.queries.prompts import prompt_rows

FULL = ["memory", "skill_manage", "terminal"]
DEGRADED = "You are Hermes.\n\n## Memory\n\nfacts\n\n## Tools\n\nmemory\n"
HEALTHY = f"You are Hermes.\n\n{SKILL_SAFETY_HEADING}\n\nguidance\n\n## Tools\n\nskill_manage\n"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SessionEngine]:
    """An engine over a fresh state.db."""
    eng = SessionEngine.open(tmp_path)
    yield eng
    eng.close()


@pytest.fixture
def store(engine: SessionEngine, tmp_path: Path) -> dict[str, str]:
    """One session per repair class, keyed by the class it should get."""
    cwd = str(tmp_path)
    return {
        "candidate": engine.start_session("cli", cwd=cwd, system_prompt=DEGRADED, tools=FULL),
        "unverifiable_no_pin": engine.start_session("cli", cwd=cwd, system_prompt=DEGRADED),
        "unverifiable_memory_only": engine.start_session(
            "cli", cwd=cwd, system_prompt=DEGRADED, tools=["memory"]
        ),
        "healthy": engine.start_session("cli", cwd=cwd, system_prompt=HEALTHY, tools=FULL),
        "no_prompt": engine.start_session("cli", cwd=cwd, tools=FULL),
    }


def test_scan_classifies_every_session(engine: SessionEngine, store: dict[str, str]) -> None:
    """The scan puts each session in its class and proposes clearing only the candidate."""
    report = scan_prompts(engine.store.connection())
    kinds = {row.session_id: row.kind for row in report.rows}
    assert kinds == {sid: kind for kind, sid in store.items()}
    assert [row.session_id for row in report.to_clear] == [store["candidate"]]
    assert report.counts == {kind: 1 for kind in store}
    assert not report.applied


def test_dry_run_changes_nothing(engine: SessionEngine, store: dict[str, str]) -> None:
    """Scanning without applying leaves every stored prompt and the log untouched."""
    conn = engine.store.connection()
    before = prompt_rows(conn)
    head = conn.execute("SELECT MAX(id) FROM events").fetchall()[0][0]
    scan_prompts(conn)
    assert prompt_rows(conn) == before
    assert conn.execute("SELECT MAX(id) FROM events").fetchall()[0][0] == head


def test_apply_clears_only_candidates(engine: SessionEngine, store: dict[str, str]) -> None:
    """Applying clears the candidate's stored prompt and leaves unverifiable and healthy rows."""
    report = apply_repairs(engine, scan_prompts(engine.store.connection()))
    assert report.applied
    assert [row.session_id for row in report.rows if row.cleared] == [store["candidate"]]
    assert engine.stored_prompt(store["candidate"]) is None
    for kind in ("unverifiable_no_pin", "unverifiable_memory_only"):
        assert engine.stored_prompt(store[kind]) == DEGRADED
    assert engine.stored_prompt(store["healthy"]) == HEALTHY
    again = scan_prompts(engine.store.connection())
    assert again.counts["candidate"] == 0 and again.counts["no_prompt"] == 2


@pytest.mark.parametrize("kind", ["unverifiable_no_pin", "unverifiable_memory_only", "healthy"])
def test_naming_a_session_clears_it_whatever_its_class(
    engine: SessionEngine, store: dict[str, str], kind: str
) -> None:
    """An explicit SESSION_ID is cleared on apply even when a scan would leave it alone."""
    sid = store[kind]
    report = scan_prompts(engine.store.connection(), sid[:-1])
    assert report.explicit and [row.kind for row in report.rows] == [kind]
    assert [row.session_id for row in report.to_clear] == [sid]
    assert engine.stored_prompt(sid) is not None
    apply_repairs(engine, report)
    assert engine.stored_prompt(sid) is None
    assert engine.stored_prompt(store["candidate"]) == DEGRADED


def test_memory_only_row_becomes_candidate_after_resume_repin(
    engine: SessionEngine, store: dict[str, str]
) -> None:
    """Once a resume re-pins the full tool surface, the memory-only row is a candidate."""
    sid = store["unverifiable_memory_only"]
    assert repin_tools_on_resume(engine, sid, FULL)
    report = scan_prompts(engine.store.connection(), None)
    assert {row.session_id for row in report.to_clear} == {store["candidate"], sid}


def test_apply_skips_a_row_rebuilt_since_the_scan(
    engine: SessionEngine, store: dict[str, str]
) -> None:
    """A candidate whose prompt changed after the scan is not cleared by that scan."""
    report = scan_prompts(engine.store.connection())
    engine.store_system_prompt(store["candidate"], HEALTHY, reason="refresh")
    done = apply_repairs(engine, report)
    assert not any(row.cleared for row in done.rows)
    assert engine.stored_prompt(store["candidate"]) == HEALTHY


def test_refresh_all_counts_sessions_holding_a_prompt(
    engine: SessionEngine, store: dict[str, str]
) -> None:
    """Refreshing everything requests a refresh on each session holding a prompt, once."""
    result = refresh_prompts(engine)
    assert result.holding == 4 and result.requested == 4
    assert set(result.targeted) == set(store.values()) - {store["no_prompt"]}
    assert not engine.get(store["no_prompt"]).refresh_pending
    again = refresh_prompts(engine)
    assert again.holding == 4 and again.requested == 0


def test_refresh_named_session_without_prompt_requests_nothing(
    engine: SessionEngine, store: dict[str, str]
) -> None:
    """A named session with no stored prompt gets no request (its next turn builds one)."""
    result = refresh_prompts(engine, store["no_prompt"])
    assert (result.holding, result.requested) == (0, 0)
    assert not engine.get(store["no_prompt"]).refresh_pending


def test_refresh_unknown_session_is_an_error(engine: SessionEngine, store: dict[str, str]) -> None:
    """Refreshing a session that does not exist fails naming it."""
    with pytest.raises(SessionNotFoundError, match="nope"):
        refresh_prompts(engine, "nope")
