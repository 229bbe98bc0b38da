"""Restore JSON/JSONL backups as archived history, all or nothing.

Every file is decoded with typed msgspec decoders first; a malformed line, a wrong type (named by
file, line and ``$.path``), a duplicate id, or a cycle in parent links refuses the whole import
before anything is written. Then one transaction restores every session: its original id and
metadata (``SessionStarted`` at the original start time), title, stored prompt, token totals,
end and continuation, pinned / archived (with its sweep origin) / hidden flags through the
aggregate's decisions, and every stored row through ``HistoryImported`` with its original state.
Restored rows are archived history: they are shown and searchable, never live model context.

Every object also passes the rules native appends keep (``check_backup_session``): no negative
token count, no tool result answering a call id no message of the session made; and a parent id
must name a session of this import or of the store. Each refusal names ``file:line`` and the
``$.path`` of the value.

Re-importing: a session whose id already exists with the same content (what a backup of it would
hold now, ignoring ``exported_at``) is skipped, and so is a line identical to an earlier line of
the input. A conflict, i.e. an existing id with different content, the same id twice with
different content, or a title another session uses, refuses the whole import by default
(``on_conflict="refuse"``), naming file and line; with ``on_conflict="skip"`` the conflicting
session (and any child of it that then has no parent) is left out and listed in
``ImportReport.conflicts`` with file, line and reason, and everything else is imported.

Each session's events are written (still inside the one transaction) right after it is
restored, so a version clash in the log — a concurrent writer, or a log that already holds
events the ``sessions`` table does not show — is reported naming the file and line of the
session that clashed; any other conflict when the transaction commits names the files.
"""

from __future__ import annotations

import codecs
import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Literal

import msgspec
from eventsourcing.persistence import IntegrityError

from hermes_es import events as ev
from hermes_es.aggregates import session as agg
from hermes_es.aggregates.state import SessionState
from hermes_es.commands.bulk import fill_if_empty, merge_filled
from hermes_es.commands.unit_of_work import Batch, Store
from hermes_es.config import HermesConfig, SessionsConfig
from hermes_es.errors import ConflictError, GuardError, HermesError, ValidationError
from hermes_es.export import backup
from hermes_es.queries import lookup

IMPORT_ACTOR = "import"
OnConflict = Literal["refuse", "skip"]
ON_CONFLICT: tuple[str, ...] = ("refuse", "skip")


class BackupLine(msgspec.Struct, frozen=True, kw_only=True):
    """One decoded backup object and where it came from."""

    path: str
    line: int
    session: backup.BackupSession

    def where(self) -> str:
        """``file:line`` for error messages."""
        return f"{self.path}:{self.line}"


class SkippedConflict(msgspec.Struct, frozen=True, kw_only=True):
    """A session ``on_conflict="skip"`` left out: where it was and why."""

    where: str
    """``file:line`` of the backup object."""
    session_id: str
    reason: str


class ImportReport(msgspec.Struct, kw_only=True):
    """What an import restored, what it skipped as already present, and what it left out."""

    files: list[str] = []
    imported: list[str] = []
    skipped: list[str] = []
    """Ids already present with the same content."""
    duplicates: list[str] = []
    """``file:line`` of input lines identical to an earlier one (read once)."""
    conflicts: list[SkippedConflict] = []
    """Sessions left out by ``on_conflict="skip"`` (always empty with ``"refuse"``)."""
    messages: int = 0


def max_import_messages(config: HermesConfig | None) -> int:
    """``sessions.max_import_messages`` (default 20000; 0 disables)."""
    return (config.sessions if config else SessionsConfig()).max_import_messages


def backup_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The files to read: each path, or every ``.jsonl``/``.json`` backup in a directory.

    A directory holding no backup file is an error (an empty backup is not a successful one).
    """
    out: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            found = sorted(
                p
                for p in path.iterdir()
                if p.suffix in (".jsonl", ".json")
                and p.name != "manifest.jsonl"
                and ".prompts." not in p.name
            )
            if not found:
                raise ValidationError(
                    f"no backup files (*.jsonl, *.json) in {path}; nothing was imported",
                    subject=str(path),
                )
            out += found
        elif path.is_file():
            out.append(path)
        else:
            raise ValidationError(f"no backup file at {path}", subject=str(path))
    return out


def _canonical(session: backup.BackupSession) -> backup.BackupSession:
    """Explicit states and uids, no export time: equal objects mean equal content."""
    messages = []
    for i, m in enumerate(session.messages):
        state = m.resolved_state()
        messages.append(
            msgspec.structs.replace(
                m,
                state=state,
                active=state == "active",
                compacted=state == "compacted",
                uid=m.uid or f"restored-{i}",
            )
        )
    return msgspec.structs.replace(session, exported_at=0.0, messages=messages)


def _decode(path: Path, line: int, data: bytes) -> BackupLine:
    try:
        session = backup.decode_session(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValidationError(f"{path}:{line}: {exc}", subject=f"{path}:{line}") from exc
    if not session.format.startswith("hermes-es.session/"):
        raise ValidationError(
            f"{path}:{line}: unknown backup format {session.format!r}", subject=f"{path}:{line}"
        )
    if not session.id:
        raise ValidationError(f"{path}:{line}: empty session id - at `$.id`")
    return BackupLine(path=str(path), line=line, session=_canonical(session))


def read_backup_file(path: Path) -> list[BackupLine]:
    """Decode every object of one file (``.json``: one document; else one per line).

    A file holding no backup object (empty, or blank lines only) is refused, naming the file.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValidationError(f"cannot read {path}: {exc}", subject=str(path)) from exc
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]  # written by some Windows editors; not content
    if not data.strip():
        raise ValidationError(
            f"{path}: empty backup file (no sessions in it); nothing was imported",
            subject=str(path),
        )
    if path.suffix == ".json":
        return [_decode(path, 1, data)]
    out = []
    for number, raw in enumerate(data.splitlines(), 1):
        if raw.strip():
            out.append(_decode(path, number, raw))
    return out


def check_backup_session(session: backup.BackupSession) -> str | None:
    """The first rule a backup object breaks that native appends keep, or None.

    No negative token count (session totals or any row); every tool result with a call id
    answers a tool call some message of the session made (any state: rewound rows included).
    The answer names the ``$.path`` of the bad value. Pure: callers add ``file:line``.
    """
    for name in ("tokens_in", "tokens_out"):
        value = getattr(session, name)
        if value < 0:
            return f"`$.{name}` is {value}: token counts cannot be negative"
    calls = {call.id for m in session.messages for call in m.tool_calls}
    for i, m in enumerate(session.messages):
        for name in ("tokens_in", "tokens_out"):
            value = getattr(m, name)
            if value < 0:
                return f"`$.messages[{i}].{name}` is {value}: token counts cannot be negative"
        for j, call in enumerate(m.tool_calls):
            if not call.id or not call.name:
                return f"`$.messages[{i}].tool_calls[{j}]`: a tool call needs an id and a name"
        if m.role == "tool" and m.tool_call_id and m.tool_call_id not in calls:
            return (
                f"`$.messages[{i}].tool_call_id` is {m.tool_call_id!r}, which no tool call "
                "of this session made"
            )
    return None


def check_lines(
    lines: Sequence[BackupLine],
    *,
    on_conflict: OnConflict = "refuse",
    report: ImportReport | None = None,
) -> list[BackupLine]:
    """Check every object's rows, drop identical duplicates, refuse (or, with ``skip``, leave
    out) the same id with different content, refuse parent cycles; return the lines parents
    first. Duplicates and skipped conflicts are recorded in ``report``."""
    report = report if report is not None else ImportReport()
    by_id: dict[str, BackupLine] = {}
    for item in lines:
        problem = check_backup_session(item.session)
        if problem is not None:
            raise ValidationError(
                f"{item.where()}: session {item.session.id}: {problem}; nothing was imported",
                subject=item.session.id,
            )
        first = by_id.get(item.session.id)
        if first is not None:
            if first.session == item.session:
                report.duplicates.append(f"{item.where()} (same as {first.where()})")
                continue
            reason = f"duplicate session id with different content (first at {first.where()})"
            if on_conflict == "skip":
                report.conflicts.append(
                    SkippedConflict(where=item.where(), session_id=item.session.id, reason=reason)
                )
                continue
            raise ValidationError(
                f"{item.where()}: duplicate session id {item.session.id!r} with different "
                f"content (first at {first.where()}); nothing was imported "
                "(--on-conflict skip leaves it out)",
                subject=item.session.id,
            )
        by_id[item.session.id] = item
    ordered: list[BackupLine] = []
    done: set[str] = set()
    for item in by_id.values():
        chain: list[str] = []
        node: str | None = item.session.id
        while node is not None and node in by_id and node not in done:
            if node in chain:
                cycle = " → ".join([*chain[chain.index(node) :], node])
                raise ValidationError(
                    f"{by_id[node].where()}: parent links form a cycle ({cycle}); "
                    "nothing was imported",
                    subject=node,
                )
            chain.append(node)
            node = by_id[node].session.parent_id or None
        for sid in reversed(chain):
            done.add(sid)
            ordered.append(by_id[sid])
    return ordered


def read_backups(
    paths: Iterable[str | os.PathLike[str]],
    *,
    max_messages: int = 20000,
    on_conflict: OnConflict = "refuse",
    report: ImportReport | None = None,
) -> tuple[list[Path], list[BackupLine]]:
    """Decode and validate every file (guard and row rules included); nothing is written."""
    files = backup_files(paths)
    lines = [item for path in files for item in read_backup_file(path)]
    for item in lines:
        n = len(item.session.messages)
        if max_messages > 0 and n > max_messages:
            raise GuardError(
                f"{item.where()}: session {item.session.id} holds {n} messages, more than "
                f"sessions.max_import_messages = {max_messages}; nothing was imported",
                subject=item.session.id,
            )
    return files, check_lines(lines, on_conflict=on_conflict, report=report)


class _Restorer:
    """Restores backup sessions inside one batch."""

    def __init__(self, batch: Batch, actor: str) -> None:
        self.batch = batch
        self.actor = actor
        self.titles: dict[str, str] = {}
        self.prompts: set[str] = set()

    def prompt(self, text: str) -> str:
        sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if sha not in self.prompts and not lookup.prompt_exists(self.batch.conn, sha):
            self.batch.record_other(
                f"prompt:{sha}",
                [ev.PromptStored(at=self.batch.now, actor=self.actor, sha256=sha, text=text)],
            )
        self.prompts.add(sha)
        return sha

    def title_owner(self, session_id: str, title: str) -> str | None:
        """Another session already holding ``title`` (stored or restored earlier), or None."""
        owner = self.titles.get(title.lower()) or lookup.title_owner(self.batch.conn, title)
        return owner if owner and owner != session_id else None

    def title(self, state: SessionState, title: str, kind: str, where: str) -> None:
        key = title.lower()
        owner = self.titles.get(key) or lookup.title_owner(self.batch.conn, title)
        if owner and owner != state.session_id:
            raise ValidationError(
                f"{where}: title {title!r} is already used by session {owner}; "
                "rename one of them first; nothing was imported",
                subject=title,
            )
        self.titles[key] = state.session_id
        b = self.batch
        b.record(
            state.session_id,
            agg.set_title(state, title, kind=kind or "user", at=b.now, actor=self.actor),
        )

    def restore(self, s: backup.BackupSession, origin: str, where: str) -> None:
        b, actor, now = self.batch, self.actor, self.batch.now
        prompt_hash = self.prompt(s.system_prompt) if s.system_prompt else ""
        started = agg.start(
            s.id, at=s.started_at or now, actor=actor, source=s.source,
            parent_id=s.parent_id, parent_kind=s.parent_kind, user_id=s.user_id,
            platform=s.platform, chat_id=s.chat_id, profile=s.profile, model=s.model,
            model_config=dict(s.model_config), launch_flags=dict(s.launch_flags),
            prompt_hash=prompt_hash, tools=s.tools, cwd=s.cwd, workspace_key=s.workspace_key,
            imported_from=origin,
        )  # fmt: skip
        state = b.record(s.id, started, expected_version=0)
        if state.reasoning != s.reasoning:
            b.record(s.id, [ev.ReasoningChanged(at=now, actor=actor, level=s.reasoning)])
        if s.title:
            self.title(state, s.title, s.title_kind, where)
        messages = [_message(i, m) for i, m in enumerate(s.messages)]
        states = [m.resolved_state() for m in s.messages]
        b.record(
            s.id, agg.import_history(state, messages, states, origin=origin, at=now, actor=actor)
        )
        if s.tokens_in != state.tokens_in or s.tokens_out != state.tokens_out:
            usage = ev.TokenUsageRecorded(
                at=now,
                actor=actor,
                tokens_in=s.tokens_in - state.tokens_in,
                tokens_out=s.tokens_out - state.tokens_out,
            )
            b.record(s.id, [usage])
        if s.ended:
            b.record(s.id, agg.end(state, s.end_reason or "ended", at=now, actor=actor))
        if s.continued_into:
            b.record(s.id, [ev.SessionContinued(at=now, actor=actor, child_id=s.continued_into)])
        b.record(s.id, agg.pin(state, s.pinned, at=now, actor=actor))
        if s.archived:
            b.record(s.id, agg.archive(state, s.archived, at=now, actor=actor))
        b.record(s.id, agg.hide(state, s.hidden, at=now, actor=actor))


def _message(index: int, m: backup.BackupMessage) -> ev.Message:
    return ev.Message(
        seq=index, uid=m.uid, role=m.role, content=m.content, tool_calls=list(m.tool_calls),
        tool_call_id=m.tool_call_id, tool_name=m.tool_name, reasoning=m.reasoning,
        tokens_in=m.tokens_in, tokens_out=m.tokens_out, media=list(m.media),
        finish_reason=m.finish_reason, at=m.at, reasoning_content=m.reasoning_content,
        token_count=m.token_count,
    )  # fmt: skip


def same_content(batch: Batch, line: BackupLine) -> bool:
    """True when the stored session is what the backup line holds."""
    current = _canonical(backup.read_backup(batch.conn, line.session.id))
    return current == line.session


def import_backups(
    store: Store,
    paths: Iterable[str | os.PathLike[str]],
    *,
    max_messages: int = 20000,
    actor: str = IMPORT_ACTOR,
    progress: Callable[[int, int], None] | None = None,
    on_conflict: OnConflict = "refuse",
) -> ImportReport:
    """Validate every file, then restore every new session in ONE transaction (all or nothing).

    ``on_conflict``: ``"refuse"`` (default) refuses the whole import at the first conflict;
    ``"skip"`` leaves conflicting sessions out and lists them in ``ImportReport.conflicts``.
    """
    if on_conflict not in ON_CONFLICT:
        raise ValidationError(
            f"unknown on_conflict {on_conflict!r}: use refuse or skip", subject=str(on_conflict)
        )
    report = ImportReport()
    files, lines = read_backups(
        paths, max_messages=max_messages, on_conflict=on_conflict, report=report
    )
    report.files = [str(f) for f in files]
    try:
        _restore_all(store, lines, report, actor, progress, on_conflict)
    except ConflictError as exc:
        if any(exc.message.startswith(f"{f}:") for f in report.files):
            raise
        raise ConflictError(
            f"{', '.join(report.files)}: {exc.message}; nothing was imported",
            subject=exc.subject or "",
            expected=exc.expected,
            actual=exc.actual,
        ) from exc
    return report


def _restore_all(
    store: Store,
    lines: Sequence[BackupLine],
    report: ImportReport,
    actor: str,
    progress: Callable[[int, int], None] | None,
    on_conflict: OnConflict = "refuse",
) -> None:
    """Restore every new line in one transaction, writing each session's events as it goes.

    The full-text rows of every restored session are written once, before the transaction
    commits (``deferred_index``, as a group commit and a migration write them): indexing each
    session as it is flushed wrote a segment and ran an index merge step per session. Into a
    store with no session yet the index is filled as a rebuild fills it (``bulk.fill_index``:
    no segment merged while the rows are written, one merge into a single segment after the
    commit, in short transactions of its own)."""
    total = sum(len(item.session.messages) for item in lines)
    done = 0
    tick = progress or (lambda d, t: None)
    with ExitStack() as stack:
        batch = stack.enter_context(store.transaction())
        filled = fill_if_empty(stack, store, batch)
        deferred_index = getattr(store.projections, "deferred_index", None)
        if deferred_index is not None:  # exits first: the index rows, then the commit
            stack.enter_context(deferred_index(batch.conn))
        _check_parents(batch, lines)
        restorer = _Restorer(batch, actor)
        left_out: set[str] = set()

        def conflict(item: BackupLine, reason: str, advice: str) -> None:
            if on_conflict != "skip":
                raise ValidationError(
                    f"{item.where()}: {reason}; {advice}; nothing was imported "
                    "(--on-conflict skip leaves it out)",
                    subject=item.session.id,
                )
            left_out.add(item.session.id)
            report.conflicts.append(
                SkippedConflict(where=item.where(), session_id=item.session.id, reason=reason)
            )

        for item in lines:
            sid = item.session.id
            parent = item.session.parent_id
            if batch.load(sid).version:
                if same_content(batch, item):
                    report.skipped.append(sid)
                else:
                    conflict(
                        item,
                        f"session {sid} already exists with different content",
                        "delete it first to restore this backup",
                    )
            elif parent in left_out and not batch.load(parent).version:
                conflict(item, f"its parent session {parent} was left out", "import it first")
            elif item.session.title and (owner := restorer.title_owner(sid, item.session.title)):
                conflict(
                    item,
                    f"title {item.session.title!r} is already used by session {owner}",
                    "rename one of them first",
                )
            else:
                try:
                    restorer.restore(item.session, f"backup:{Path(item.path).name}", item.where())
                except HermesError as exc:
                    if exc.message.startswith(item.where()):
                        raise
                    raise ValidationError(
                        f"{item.where()}: {exc.message}; nothing was imported", subject=sid
                    ) from exc
                _flush(batch, item)
                report.imported.append(sid)
                report.messages += len(item.session.messages)
            done += len(item.session.messages)
            tick(done, total)
    if filled:  # committed: the segments the fill left are merged into one
        merge_filled(store)


def _check_parents(batch: Batch, lines: Sequence[BackupLine]) -> None:
    """Refuse a parent id that names no session of this import and none of the store."""
    ids = {item.session.id for item in lines}
    for item in lines:
        parent = item.session.parent_id
        if parent and parent not in ids and not batch.load(parent).version:
            raise ValidationError(
                f"{item.where()}: session {item.session.id}: `$.parent_id` {parent!r} names no "
                "session of this import or of the store; import the parent too; "
                "nothing was imported",
                subject=item.session.id,
            )


def _flush(batch: Batch, item: BackupLine) -> None:
    """Write one restored session's events now, so a clash in the log names its file and line."""
    try:
        batch.flush()
    except IntegrityError as exc:
        sid = item.session.id
        raise ConflictError(
            f"{item.where()}: session {sid} clashes with events already in the log ({exc}): "
            "another writer stored it first, or the sessions table is out of step with the "
            "log (`hermes doctor` checks); nothing was imported",
            subject=sid,
            expected=0,
            actual=-1,
        ) from exc
