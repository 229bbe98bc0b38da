"""Conversations as units: every compression segment of a chain, its live tip and delegates.

Prune and archive decide per unit, never per segment: a compression chain (segments sharing a
``root_id``) is judged by its live tip (the segment whose continuation does not exist), so an
old segment never matches on its own age. Delegate (subagent) sessions belong to the unit of
the session that spawned them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import apsw
import msgspec


class Segment(msgspec.Struct, frozen=True, kw_only=True):
    """One session row, as unit rules need it."""

    id: str
    root_id: str
    continued_into: str
    parent_id: str
    parent_kind: str
    source: str
    title: str
    cwd: str
    workspace: str
    started_at: float
    last_active: float
    ended: bool
    pinned: bool
    archived: str
    messages: int


class Unit(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation: its compression segments (root first), live tip and delegate sessions."""

    root_id: str
    tip: Segment
    members: list[Segment]
    delegates: list[Segment]
    delegate_of: str = ""
    """Set when the conversation is itself a delegate of a session that still exists."""

    @property
    def ids(self) -> list[str]:
        """Segment ids, root first."""
        return [m.id for m in self.members]

    @property
    def messages(self) -> int:
        """Messages stored across every segment."""
        return sum(m.messages for m in self.members)

    @property
    def last_active(self) -> float:
        """When the conversation was last active (its tip)."""
        return self.tip.last_active

    @property
    def archived(self) -> str:
        """``user`` if any segment was archived by a person, else the tip's archive reason."""
        if any(m.archived == "user" for m in self.members):
            return "user"
        return self.tip.archived


_COLUMNS = (
    "id, root_id, continued_into, parent_id, parent_kind, source, title, cwd, workspace_key,"
    " started_at, last_active, ended, pinned, archived, message_count"
)


def _segment(r: Sequence[object]) -> Segment:
    return Segment(
        id=str(r[0]),
        root_id=str(r[1] or r[0]),
        continued_into=str(r[2]),
        parent_id=str(r[3]),
        parent_kind=str(r[4]),
        source=str(r[5]),
        title=str(r[6]),
        cwd=str(r[7]),
        workspace=str(r[8]),
        started_at=float(r[9]),  # type: ignore[arg-type]
        last_active=float(r[10]),  # type: ignore[arg-type]
        ended=bool(r[11]),
        pinned=bool(r[12]),
        archived=str(r[13]),
        messages=int(r[14]),  # type: ignore[call-overload]
    )


def load_segments(conn: apsw.Connection) -> list[Segment]:
    """Every session row (oldest first)."""
    return [
        _segment(r)
        for r in conn.execute(f"SELECT {_COLUMNS} FROM sessions ORDER BY started_at, id")
    ]


def chain_segments(conn: apsw.Connection, session_id: str) -> list[Segment]:
    """Every segment of the conversation ``session_id`` belongs to (root first)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM sessions WHERE root_id ="
        " (SELECT root_id FROM sessions WHERE id = ?) ORDER BY started_at, id",
        (session_id,),
    ).fetchall()
    return [_segment(r) for r in rows]


def _tip(members: list[Segment], known: set[str]) -> Segment:
    """The segment whose continuation does not exist (the newest one if several)."""
    live = [m for m in members if not m.continued_into or m.continued_into not in known]
    return max(live or members, key=lambda m: (m.last_active, m.started_at, m.id))


def build_units(segments: Iterable[Segment]) -> list[Unit]:
    """Group session rows into conversations with their delegate sessions."""
    rows = list(segments)
    known = {s.id for s in rows}
    chains: dict[str, list[Segment]] = {}
    for s in rows:
        chains.setdefault(s.root_id if s.root_id in known else s.id, []).append(s)
    root_of = {s.id: root for root, members in chains.items() for s in members}
    delegate_roots: dict[str, list[str]] = {}
    for root, members in chains.items():
        head = members[0]
        if head.parent_kind == "delegate" and head.parent_id in known:
            delegate_roots.setdefault(root_of[head.parent_id], []).append(root)
    units: list[Unit] = []
    for root, members in chains.items():
        delegates: list[Segment] = []
        stack = list(delegate_roots.get(root, []))
        seen: set[str] = set()
        while stack:
            child = stack.pop()
            if child in seen or child == root:
                continue
            seen.add(child)
            delegates.extend(chains[child])
            stack.extend(delegate_roots.get(child, []))
        head = members[0]
        parent_unit = ""
        if head.parent_kind == "delegate" and head.parent_id in known:
            parent_unit = root_of[head.parent_id]
        units.append(
            Unit(
                root_id=root,
                tip=_tip(members, known),
                members=members,
                delegates=delegates,
                delegate_of=parent_unit,
            )
        )
    return units


def load_units(conn: apsw.Connection) -> list[Unit]:
    """Every conversation in the store."""
    return build_units(load_segments(conn))
