"""Who holds state.db: one lease file per registration under ``<db dir>/holders/``.

A process that keeps state.db open for a while (a chat, a dashboard, a scheduled job, the
gateway) wraps that work in ``register_holder``. The lease file ``<pid>.json`` (a second lease of
the same process gets ``<pid>-<n>.json``) names the pid, kind, session id, start time, host and
the process start time read from ``/proc/<pid>/stat``.

A crashed holder never blocks forever: a lease counts only while its pid is alive (``kill(pid,
0)``) *and* that pid's process start time is still the recorded one, so a reused pid does not
count either. Dead or reused leases are removed when read. Leases from another host are
ignored (SQLite's WAL mode does not work across hosts, so they cannot hold this state.db).

Take-over: a process that takes over a session another live chat holds rewrites that chat's
lease with its own pid and command (``mark_taken_over``) before it records anything. The lease
lives exactly as long as the holder that must learn of it, so the mark is there even when the
taking-over process has already finished. The holder reads its own lease before each write
(``check_taken_over``) and, once marked, writes nothing more to that session.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

from hermes_es.errors import HolderError

HOLDERS_DIR = "holders"

_counter = itertools.count(1)


class Holder(msgspec.Struct, frozen=True, kw_only=True):
    """One live registration of a process that holds state.db."""

    pid: int
    kind: str
    session_id: str | None = None
    started_at: float
    host: str
    proc_start: int | None = None
    """The process start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    path: str = ""
    taken_over_by: int | None = None
    """The pid of the process that took this holder's session over (None: not taken over)."""
    taken_over_command: str = ""
    """How that process was started, for the message (``hermes -r ID --take-over``)."""
    taken_over_at: float | None = None


class SessionTakenOverError(HolderError):
    """Another process took over the session this chat was writing; this chat must stop."""

    def __init__(self, session_id: str, *, pid: int, command: str) -> None:
        how = f" ({command})" if command else ""
        super().__init__(f"this session was taken over by pid {pid}{how}", subject=session_id)
        self.session_id = session_id
        self.pid = pid
        self.command = command
        self.reply = ""
        """A reply the responder produced after the take-over: shown, never recorded."""


def holders_dir(db_path: Path | str) -> Path:
    """The lease directory next to ``db_path``."""
    return Path(db_path).parent / HOLDERS_DIR


def process_start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2 (comm) may hold spaces and parentheses; fields after the last ')' are plain.
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 overall: starttime
    except (IndexError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (even if owned by another user)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_zombie(pid: int) -> bool:
    """True when the process has exited but its parent has not collected it yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    return bool(fields) and fields[0] in ("Z", "X")


def is_live(holder: Holder) -> bool:
    """True while the holder's process runs (same pid and start time, and not a zombie)."""
    if not pid_alive(holder.pid) or is_zombie(holder.pid):
        return False
    if holder.proc_start is None:
        return True
    current = process_start_time(holder.pid)
    return current is None or current == holder.proc_start


def _lease_path(directory: Path, pid: int) -> Path:
    first = directory / f"{pid}.json"
    if not first.exists():
        return first
    while True:
        candidate = directory / f"{pid}-{next(_counter)}.json"
        if not candidate.exists():
            return candidate


@contextmanager
def register_holder(
    db_path: Path | str, kind: str, session_id: str | None = None
) -> Iterator[Holder]:
    """Register this process as holding ``db_path`` (as ``kind``) until the block exits."""
    if not kind:
        raise HolderError("a holder needs a kind (chat, dashboard, cron, gateway, …)")
    directory = holders_dir(db_path)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)  # private whatever the umask, and if an older version made it
    pid = os.getpid()
    path = _lease_path(directory, pid)
    holder = Holder(
        pid=pid,
        kind=kind,
        session_id=session_id,
        started_at=time.time(),
        host=socket.gethostname(),
        proc_start=process_start_time(pid),
        path=str(path),
    )
    _write_lease(path, holder)
    try:
        yield holder
    finally:
        path.unlink(missing_ok=True)


def _write_lease(path: Path, holder: Holder) -> None:
    """Write a lease atomically (a temporary file per writing process, then a rename)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(tmp, flags, 0o600), "wb") as out:
        os.fchmod(out.fileno(), 0o600)  # 0600 whatever the umask (it names pids and sessions)
        out.write(msgspec.json.encode(holder))
    os.replace(tmp, path)


def _read_lease(path: Path) -> Holder | None:
    try:
        data = json.loads(path.read_bytes())
        holder = msgspec.convert(data, Holder)
    except (OSError, ValueError, msgspec.ValidationError):
        return None
    return msgspec.structs.replace(holder, path=str(path))


def live_holders(db_path: Path | str, *, exclude_self: bool = False) -> list[Holder]:
    """Every live holder of ``db_path`` (stale leases are removed), oldest first."""
    directory = holders_dir(db_path)
    if not directory.is_dir():
        return []
    host = socket.gethostname()
    me = os.getpid()
    out: list[Holder] = []
    for path in sorted(directory.glob("*.json")):
        holder = _read_lease(path)
        if holder is None:
            if time.time() - _mtime(path) > 60:
                path.unlink(missing_ok=True)  # unreadable and not being written
            continue
        if holder.host != host:
            continue
        if not is_live(holder):
            path.unlink(missing_ok=True)
            continue
        if exclude_self and holder.pid == me:
            continue
        out.append(holder)
    return sorted(out, key=lambda h: (h.started_at, h.pid))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def describe(holder: Holder) -> str:
    """``pid 1234 (chat, session 2025…)`` for messages."""
    extra = f", session {holder.session_id}" if holder.session_id else ""
    return f"pid {holder.pid} ({holder.kind}{extra})"


def require_no_holders(db_path: Path | str, action: str) -> None:
    """Raise ``HolderError`` naming every other live holder of ``db_path``."""
    others = live_holders(db_path, exclude_self=True)
    if others:
        names = "; ".join(describe(h) for h in others)
        raise HolderError(
            f"{action} refused: state.db is held by {names}. Stop it first, or pass --force",
            subject=str(db_path),
        )


def held_sessions(db_path: Path | str) -> set[str]:
    """Session ids that a live holder (other than this process) has open."""
    return {
        h.session_id for h in live_holders(db_path, exclude_self=True) if h.session_id is not None
    }


def mark_taken_over(
    db_path: Path | str, session_id: str, *, kind: str, command: str = ""
) -> list[Holder]:
    """Mark every other live ``kind`` holder of ``session_id`` as taken over by this process.

    Returns the holders marked. A holder that exits meanwhile leaves a lease with a dead pid,
    which ``live_holders`` removes like any stale lease.
    """
    me = os.getpid()
    marked: list[Holder] = []
    for holder in live_holders(db_path, exclude_self=True):
        if holder.kind != kind or holder.session_id != session_id:
            continue
        taken = msgspec.structs.replace(
            holder, taken_over_by=me, taken_over_command=command, taken_over_at=time.time()
        )
        _write_lease(Path(holder.path), taken)
        marked.append(taken)
    return marked


def check_taken_over(holder: Holder) -> None:
    """Raise ``SessionTakenOverError`` when another process has marked this lease taken over."""
    current = _read_lease(Path(holder.path))
    if current is None or current.taken_over_by is None:
        return
    raise SessionTakenOverError(
        holder.session_id or "",
        pid=current.taken_over_by,
        command=current.taken_over_command,
    )
