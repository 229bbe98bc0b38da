"""Use cases behind ``hermes sessions refresh-prompts`` and ``hermes sessions repair-prompts``.

Refresh leaves a request on each session holding a stored prompt; the session's next turn
rebuilds it (see ``commands.prompting``). Repair scans stored prompts for the degraded
reduced-toolset shape and, only when asked to apply, clears the candidates so their next turn
rebuilds them. Scans are reads (they take a query connection); only applying writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import apsw
import msgspec

from hermes_es.commands.prompting import repin_tools_on_resume
from hermes_es.prompts.repair import REPAIR_CLASSES, RepairClass, classify, explain
from hermes_es.queries.prompts import PromptRow, prompt_rows, prompt_texts, sessions_holding_prompt
from hermes_es.queries.resolve import resolve_session

if TYPE_CHECKING:
    from hermes_es.commands.engine import SessionEngine

__all__ = [
    "RefreshResult",
    "RepairReport",
    "RepairRow",
    "apply_repairs",
    "refresh_prompts",
    "repin_tools_on_resume",
    "scan_prompts",
]

Action = Literal["clear", "none"]


class RefreshResult(msgspec.Struct, frozen=True, kw_only=True):
    """What ``refresh-prompts`` did."""

    targeted: list[str]
    """Sessions considered: the one named, or every session of the store."""
    holding: int
    """How many targeted sessions hold a stored prompt."""
    requested: int
    """How many got a new refresh request (the rest already had one pending)."""


class RepairRow(msgspec.Struct, frozen=True, kw_only=True):
    """The repair scan's verdict on one session."""

    session_id: str
    title: str
    kind: RepairClass
    explanation: str
    """Why the row gets its action: the class's explanation, or for a session named
    explicitly, what the scan found plus that naming it clears it whatever its class."""
    prompt_hash: str
    tools: list[str] | None
    action: Action
    """``clear`` when applying would clear this row's stored prompt."""
    cleared: bool = False
    """Whether the stored prompt was actually cleared (only with apply)."""
    explicit: bool = False
    """True when this session was named on the command line (cleared whatever its class)."""


class RepairReport(msgspec.Struct, frozen=True, kw_only=True):
    """A whole repair scan: every row, counts per class, whether it was applied."""

    rows: list[RepairRow]
    counts: dict[str, int]
    """How many rows fell in each repair class (every class listed, in report order)."""
    explicit: bool
    """True when one SESSION_ID was named (it is cleared whatever its class)."""
    applied: bool = False

    @property
    def to_clear(self) -> list[RepairRow]:
        """Rows applying clears."""
        return [row for row in self.rows if row.action == "clear"]


def refresh_prompts(engine: SessionEngine, session_ref: str | None = None) -> RefreshResult:
    """Request a prompt refresh on the named session, or on every session holding a prompt."""
    conn = engine.store.connection()
    if session_ref is not None:
        targeted = [resolve_session(conn, session_ref)]
        holders = [row.session_id for row in prompt_rows(conn, targeted) if row.prompt_hash]
    else:
        holders = sessions_holding_prompt(conn)
        targeted = holders
    already = sum(1 for row in prompt_rows(conn, holders) if row.refresh_pending)
    if holders:
        engine.request_prompt_refresh(holders)
    return RefreshResult(targeted=targeted, holding=len(holders), requested=len(holders) - already)


def scan_prompts(conn: apsw.Connection, session_ref: str | None = None) -> RepairReport:
    """Classify stored prompts (every session, or the one named) without changing anything."""
    explicit = session_ref is not None
    ids = [resolve_session(conn, session_ref)] if session_ref is not None else None
    rows = prompt_rows(conn, ids)
    texts = prompt_texts(conn, (row.prompt_hash for row in rows))
    verdicts = [_verdict(row, texts.get(row.prompt_hash), explicit) for row in rows]
    counts: dict[str, int] = {
        kind: sum(1 for v in verdicts if v.kind == kind) for kind in REPAIR_CLASSES
    }
    return RepairReport(rows=verdicts, counts=counts, explicit=explicit)


_FINDINGS: dict[RepairClass, str] = {
    "candidate": "the stored prompt lacks the Skill Safety guidance although the session's "
    "tools include skill_manage",
    "unverifiable_no_pin": "the stored prompt lacks the Skill Safety guidance and the session "
    "has no readable tools pin",
    "unverifiable_memory_only": "the stored prompt lacks the Skill Safety guidance and the "
    "tools pin is memory-only",
    "healthy": "the stored prompt matches its tools pin",
    "no_prompt": "the session has no stored prompt",
}
"""What the scan found, without the scan's own verdict (for sessions named explicitly)."""


def _verdict(row: PromptRow, text: str | None, explicit: bool) -> RepairRow:
    """Classify one row and decide whether applying clears it."""
    kind = classify(text if row.prompt_hash else None, row.tools)
    clear = bool(row.prompt_hash) and (explicit or kind == "candidate")
    return RepairRow(
        session_id=row.session_id,
        title=row.title,
        kind=kind,
        explanation=_explicit_explanation(kind) if explicit and clear else explain(kind),
        prompt_hash=row.prompt_hash,
        tools=row.tools,
        action="clear" if clear else "none",
        explicit=explicit,
    )


def _explicit_explanation(kind: RepairClass) -> str:
    """The explanation of a session named explicitly: the finding, kept as information."""
    return (
        f"named explicitly, so --apply clears it whatever its class and its next turn "
        f"rebuilds the prompt (scan finding: {_FINDINGS[kind]})"
    )


def apply_repairs(engine: SessionEngine, report: RepairReport) -> RepairReport:
    """Clear the stored prompt of every row the report marks ``clear``; returns the result.

    A row whose stored prompt changed since the scan (another turn rebuilt it) is left alone.
    """
    done: list[RepairRow] = []
    for row in report.rows:
        if row.action == "clear" and engine.get(row.session_id).prompt_hash == row.prompt_hash:
            state = engine.clear_stored_prompt(row.session_id, reason="repair")
            row = msgspec.structs.replace(row, cleared=not state.prompt_hash)
        done.append(row)
    return msgspec.structs.replace(report, rows=done, applied=True)
