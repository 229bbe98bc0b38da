"""Which sessions an export covers: filters over the ``sessions`` table, and delegate trees."""

from __future__ import annotations

import apsw
import msgspec


class ExportFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Bulk export filters; at least one must be set (a bare bulk export is refused)."""

    sources: tuple[str, ...] = ()
    since: float | None = None
    """Sessions started at or after this time (Unix seconds)."""
    until: float | None = None
    """Sessions started before this time (Unix seconds)."""
    title: str | None = None
    """Case-insensitive substring of the title."""
    workspace: str | None = None
    """Workspace key (git repo root or directory)."""
    pinned: bool = False
    """Only pinned sessions."""
    archived: bool = False
    """Only archived sessions."""

    def is_empty(self) -> bool:
        """True when no filter is set."""
        return not (
            self.sources
            or self.since is not None
            or self.until is not None
            or self.title
            or self.workspace
            or self.pinned
            or self.archived
        )


def select_sessions(conn: apsw.Connection, f: ExportFilter) -> list[str]:
    """Ids matching every set filter, oldest first; pinned, archived and hidden are included."""
    sql = "SELECT id FROM sessions WHERE TRUE"
    params: list[object] = []
    if f.sources:
        sql += f" AND source IN ({','.join('?' * len(f.sources))})"
        params.extend(f.sources)
    if f.since is not None:
        sql += " AND started_at >= ?"
        params.append(f.since)
    if f.until is not None:
        sql += " AND started_at < ?"
        params.append(f.until)
    if f.title:
        sql += " AND instr(lower(title), lower(?)) > 0"
        params.append(f.title)
    if f.workspace:
        sql += " AND workspace_key = ?"
        params.append(f.workspace)
    if f.pinned:
        sql += " AND pinned = 1"
    if f.archived:
        sql += " AND archived <> ''"
    sql += " ORDER BY started_at, id"
    return [str(r[0]) for r in conn.execute(sql, params).fetchall()]


def delegate_tree(conn: apsw.Connection, session_id: str) -> list[str]:
    """Every delegate (subagent) session below ``session_id``, depth first."""
    out: list[str] = []
    stack = [session_id]
    while stack:
        parent = stack.pop()
        rows = conn.execute(
            "SELECT child_id FROM lineage WHERE parent_id = ? AND kind = 'delegate'"
            " ORDER BY child_id",
            (parent,),
        ).fetchall()
        for (child,) in rows:
            if child not in out and child != session_id:
                out.append(str(child))
                stack.append(str(child))
    return out


def display_version(conn: apsw.Connection, session_id: str) -> int:
    """The session's display version (0 when it does not exist)."""
    rows = conn.execute(
        "SELECT display_version FROM sessions WHERE id = ?", (session_id,)
    ).fetchall()
    return int(rows[0][0]) if rows else 0


def lineage_of(conn: apsw.Connection, session_id: str) -> dict[str, object]:
    """Lineage ids for a manifest line: parent, root, continuation and delegates."""
    rows = conn.execute(
        "SELECT parent_id, parent_kind, root_id, continued_into FROM sessions WHERE id = ?",
        (session_id,),
    ).fetchall()
    parent, kind, root, cont = rows[0] if rows else ("", "", session_id, "")
    return {
        "parent_id": parent,
        "parent_kind": kind,
        "root_id": root,
        "continued_into": cont,
        "delegates": delegate_tree(conn, session_id),
    }
