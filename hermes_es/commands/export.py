"""Export sessions to files (backup or display formats), verify them, and delete after verifying.

Every export reads one consistent snapshot: the display version written to the manifest is read
in the same read transaction as the transcript in the file. A verified delete then hands those
display versions to ``delete_session``, which compares them (and the delegate set) inside the
delete transaction: one integer per stream, never a re-read of transcripts.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import apsw
import msgspec

from hermes_es.config import HermesConfig, SessionsConfig
from hermes_es.errors import GuardError, HermesError, UsageError, ValidationError
from hermes_es.export import backup, render
from hermes_es.export.names import file_stem, unique_names
from hermes_es.export.select import delegate_tree, display_version, lineage_of
from hermes_es.redact import redact
from hermes_es.store.db import read_transaction

if TYPE_CHECKING:  # plain exports never import the write side (eventsourcing)
    from hermes_es.commands.delete import Deleted
    from hermes_es.commands.engine import SessionEngine

Format = Literal["jsonl", "json", "md", "qmd", "html"]
FORMATS: tuple[str, ...] = ("jsonl", "json", "md", "qmd", "html")
BACKUP_FORMATS = ("jsonl", "json")
EXTENSIONS = {"jsonl": ".jsonl", "json": ".json", "md": ".md", "qmd": ".qmd", "html": ".html"}
MANIFEST = "manifest.jsonl"
SAVE_GUARD_CODE = 4131
"""Error code a refused ``/save`` reports (``sessions.max_export_messages``)."""

_JSON = msgspec.json.Encoder()


class ExportVerificationError(HermesError):
    """A written export file does not match what was exported; nothing was deleted."""


class ExportOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How to export: format, optional user-prompts-only view, redaction, overwrite, guard."""

    fmt: str = "jsonl"
    only: str | None = None
    """``user-prompts`` (with md or jsonl), or None for the full export."""
    redact: bool = False
    force: bool = False
    max_messages: int = 20000
    """Per-session cap for backups (every stored row); 0 disables."""
    at: float = 0.0
    """Export time written into backup objects and the manifest (0: now)."""

    def is_backup(self) -> bool:
        """Full-session JSON/JSONL: every stored row, capped by ``max_messages``."""
        return self.fmt in BACKUP_FORMATS and self.only is None

    def extension(self) -> str:
        """File extension of the files written."""
        if self.only == "user-prompts":
            return ".prompts" + EXTENSIONS[self.fmt]
        return EXTENSIONS[self.fmt]


class ExportedFile(msgspec.Struct, frozen=True, kw_only=True):
    """One written file, as its manifest line records it."""

    file: str
    session_id: str
    title: str
    format: str
    only: str | None
    messages: int
    lineage: dict[str, Any]
    sha256: str
    display_version: int
    redacted: bool
    exported_at: float


def check_options(opts: ExportOptions) -> None:
    """Refuse unknown formats and ``--only`` with a format that cannot hold it."""
    if opts.fmt not in FORMATS:
        raise UsageError(f"unknown export format {opts.fmt!r}: use one of {', '.join(FORMATS)}")
    if opts.only is not None:
        if opts.only != "user-prompts":
            raise UsageError(f"unknown --only {opts.only!r}: the only choice is user-prompts")
        if opts.fmt not in ("md", "jsonl"):
            raise UsageError("--only user-prompts works with --format md or --format jsonl")


def max_export_messages(config: HermesConfig | None) -> int:
    """``sessions.max_export_messages`` (default 20000; 0 disables)."""
    return (config.sessions if config else SessionsConfig()).max_export_messages


def guard_export(conn: apsw.Connection, session_id: str, opts: ExportOptions) -> None:
    """Refuse a backup of a session holding more stored rows than ``max_messages``."""
    if not opts.is_backup() or opts.max_messages <= 0:
        return
    rows = backup.count_rows(conn, session_id)
    if rows > opts.max_messages:
        raise GuardError(
            f"session {session_id} holds {rows} stored messages (archived included), more than "
            f"sessions.max_export_messages = {opts.max_messages}; raise the limit in config.yaml "
            "(0 disables it), export a display format (--format md), or use the streaming export",
            subject=session_id,
            code=SAVE_GUARD_CODE,
        )


def _render(
    conn: apsw.Connection, session_id: str, opts: ExportOptions, on_row: Callable[[int], None]
) -> tuple[Iterator[bytes], Callable[[], int]]:
    """Chunks of the file for one session and a callable giving its message count."""
    if opts.fmt == "jsonl" and opts.only is None:
        counter = {"n": 0}

        def count(n: int) -> None:
            counter["n"] = n
            on_row(n)

        chunks = backup.stream_backup(
            conn, session_id, redact_secrets=opts.redact, at=opts.at, on_row=count
        )
        return chunks, lambda: counter["n"]
    session = backup.read_backup(conn, session_id, redact_secrets=opts.redact, at=opts.at)
    on_row(len(session.messages))
    data, count_ = _render_whole(session, opts)
    return iter([data]), lambda: count_


def _render_whole(session: backup.BackupSession, opts: ExportOptions) -> tuple[bytes, int]:
    if opts.only == "user-prompts":
        n = len(render.user_prompts(session))
        if opts.fmt == "jsonl":
            return render.render_prompts_jsonl(session), n
        return render.render_prompts_markdown(session).encode(), n
    if opts.fmt == "json":
        return backup.encode_pretty(session), len(session.messages)
    if opts.fmt == "jsonl":
        return backup.encode_line(session), len(session.messages)
    shown = len(render.display_messages(session))
    if opts.fmt == "html":
        return render.render_html(session).encode(), shown
    return render.render_markdown(session, quarto=opts.fmt == "qmd").encode(), shown


def render_bytes(conn: apsw.Connection, session_id: str, opts: ExportOptions) -> tuple[bytes, int]:
    """The exported bytes of one session and the number of messages they hold."""
    check_options(opts)
    with read_transaction(conn):
        guard_export(conn, session_id, opts)
        session = backup.read_backup(conn, session_id, redact_secrets=opts.redact, at=opts.at)
    return _render_whole(session, opts)


def _offset(tick: Callable[[int, int], None], base: int, total: int) -> Callable[[int], None]:
    return lambda n: tick(base + n, total)


def _exists_error(path: Path) -> ValidationError:
    return ValidationError(
        f"{path} already exists; pass --force to overwrite it", subject=str(path)
    )


def check_delete_basis(opts: ExportOptions) -> None:
    """Refuse an export that cannot back ``--delete-after-verified`` (only a full one can).

    A delete removes every stored row; the file it leaves behind must hold the whole history
    the session shows (md, qmd, html) or every stored row (json, jsonl), as stored: never only
    the user prompts, never a redacted copy.
    """
    if opts.only is not None:
        raise UsageError(
            f"--delete-after-verified needs a full-history export; --only {opts.only} holds "
            "part of the session, so it cannot back a delete (drop --only)"
        )
    if opts.redact:
        raise UsageError(
            "--delete-after-verified needs a full-history export; a --redact export is "
            "altered text, so it cannot back a delete (drop --redact)"
        )


def private_dir(path: Path) -> None:
    """Create ``path`` and any missing parents as 0700 directories, whatever the umask.

    Directories that already exist keep their mode (the user chose it).
    """
    missing: list[Path] = []
    node = path
    while not node.exists():
        missing.append(node)
        if node.parent == node:
            break
        node = node.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue
        os.chmod(directory, 0o700)


def _publish(tmp: Path, path: Path, replace: bool) -> None:
    """Move the finished ``tmp`` to ``path``; without ``replace`` never clobber a file there.

    An overwritten regular file keeps its permission bits (the new content gets the old mode).
    A symlink at ``path`` is replaced by the new 0600 file: never followed, its target neither
    written nor consulted for a mode.
    """
    if replace:
        try:
            old = path.lstat()
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISREG(old.st_mode):
                os.chmod(tmp, stat.S_IMODE(old.st_mode))
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)  # atomic: fails if anything (even a dangling link) is at ``path``
    except FileExistsError:
        raise _exists_error(path) from None
    except OSError:  # a file system without hard links: check, then move
        if os.path.lexists(path):
            raise _exists_error(path) from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def _write(path: Path, chunks: Iterable[bytes], *, replace: bool = True) -> str:
    digest = hashlib.sha256()
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)  # created exclusively: never truncates someone else's file
    try:
        os.fchmod(fd, 0o600)  # 0600 whatever the umask
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        _publish(tmp, path, replace)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return digest.hexdigest()


def _prepare_dir(output: Path, names: Sequence[str], force: bool) -> None:
    if output.exists() and not output.is_dir():
        raise ValidationError(
            f"export output {output} is a file; give a directory", subject=str(output)
        )
    if not force:
        for name in [*names, MANIFEST]:
            if os.path.lexists(output / name):
                raise _exists_error(output / name)


def _titles(
    conn: apsw.Connection, ids: Sequence[str], *, redact_secrets: bool = False
) -> dict[str, str]:
    """Each session's title, redacted when asked (it names files and fills the manifest)."""
    out: dict[str, str] = {}
    for sid in ids:
        rows = conn.execute("SELECT title FROM sessions WHERE id = ?", (sid,)).fetchall()
        if not rows:
            raise ValidationError(f"no session {sid!r} to export", subject=sid)
        title = str(rows[0][0])
        out[sid] = redact(title) if redact_secrets else title
    return out


def export_sessions(
    conn: apsw.Connection,
    output: Path,
    session_ids: Sequence[str],
    opts: ExportOptions,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> list[ExportedFile]:
    """Write one file per session plus ``manifest.jsonl`` into ``output``, from one snapshot.

    Guards and name clashes are checked for every session before anything is written.
    """
    check_options(opts)
    opts = opts if opts.at else msgspec.structs.replace(opts, at=round(time.time(), 3))
    tick = progress or (lambda done, total: None)
    with read_transaction(conn):
        titles = _titles(conn, session_ids, redact_secrets=opts.redact)
        for sid in session_ids:
            guard_export(conn, sid, opts)
        total = sum(backup.count_rows(conn, sid) for sid in session_ids)
        names = unique_names([file_stem(s, titles[s]) for s in session_ids], opts.extension())
        _prepare_dir(output, names, opts.force)
        private_dir(output)
        done = 0
        files: list[ExportedFile] = []
        for sid, name in zip(session_ids, names, strict=True):
            version = display_version(conn, sid)
            base = done
            chunks, count = _render(conn, sid, opts, _offset(tick, base, total))
            sha = _write(output / name, chunks)
            done = base + backup.count_rows(conn, sid)
            tick(done, total)
            files.append(
                ExportedFile(
                    file=name, session_id=sid, title=titles[sid], format=opts.fmt,
                    only=opts.only, messages=count(), lineage=lineage_of(conn, sid), sha256=sha,
                    display_version=version, redacted=opts.redact, exported_at=opts.at,
                )
            )  # fmt: skip
    _write(output / MANIFEST, (_JSON.encode(f) + b"\n" for f in files))
    return files


def verify_files(output: Path, files: Sequence[ExportedFile]) -> None:
    """Re-read every written file: its SHA-256, and for backups its id and row count, must match."""
    for f in files:
        path = output / f.file
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ExportVerificationError(
                f"cannot re-read {path}: {exc}", subject=str(path)
            ) from exc
        if hashlib.sha256(data).hexdigest() != f.sha256:
            raise ExportVerificationError(
                f"{path} does not match its manifest SHA-256; nothing was deleted",
                subject=str(path),
            )
        if f.format in BACKUP_FORMATS and f.only is None:
            session = backup.decode_session(data)
            if session.id != f.session_id or len(session.messages) != f.messages:
                raise ExportVerificationError(
                    f"{path} does not hold the {f.messages} messages of {f.session_id}",
                    subject=str(path),
                )


class VerifiedDelete(msgspec.Struct, frozen=True, kw_only=True):
    """What an export-then-delete wrote and removed."""

    files: list[ExportedFile]
    deleted: list[str]
    scrubbed: bool = True
    """False when another process's read snapshot postponed the on-disk scrub (pending)."""


def export_then_delete(
    engine: SessionEngine,
    output: Path,
    session_id: str,
    opts: ExportOptions,
    *,
    actor: str = "",
    progress: Callable[[int, int], None] | None = None,
) -> VerifiedDelete:
    """Export a session and each delegate to its own file, verify them, then delete them all.

    The delete transaction compares the exported display versions and delegate set with the
    current ones; any intervening change refuses it (``DeleteRefusedError``) and deletes nothing.
    """
    from hermes_es.commands.delete import delete_session

    check_options(opts)
    check_delete_basis(opts)
    conn = engine.store.connection()
    with read_transaction(conn):
        ids = [session_id, *delegate_tree(conn, session_id)]
        files = export_sessions(conn, output, ids, opts, progress=progress)
    verify_files(output, files)
    expected = {f.session_id: f.display_version for f in files}
    deleted: list[Deleted] = delete_session(
        engine.store, session_id, reason="export-verified", actor=actor, expected=expected
    )
    return VerifiedDelete(
        files=files,
        deleted=[d.session_id for d in deleted],
        scrubbed=all(d.scrubbed for d in deleted),
    )


def _save_new(folder: Path, stem: str, extension: str, data: bytes) -> tuple[Path, str]:
    """Write ``data`` to the first free ``stem[-N]extension`` in ``folder`` (never overwrites)."""
    for n in range(1, 10_000):
        target = folder / f"{stem}{extension if n == 1 else f'-{n}{extension}'}"
        if os.path.lexists(target):
            continue
        try:
            return target, _write(target, [data], replace=False)
        except ValidationError:  # taken meanwhile: try the next name
            if not os.path.lexists(target):
                raise
    raise ValidationError(
        f"no free file name for {stem}{extension} in {folder}", subject=str(folder)
    )


def _connection(engine_or_conn: SessionEngine | apsw.Connection) -> apsw.Connection:
    """The read connection of an engine, or the connection given (an APSW one, or a server
    store's ``PgConnection``, which only an engine's ``store`` tells apart)."""
    store = getattr(engine_or_conn, "store", None)
    if store is None:
        return cast("apsw.Connection", engine_or_conn)
    return cast("apsw.Connection", store.connection())


def save_session(
    engine_or_conn: SessionEngine | apsw.Connection,
    session_id: str,
    fmt: str,
    path: str | os.PathLike[str],
    *,
    redact: bool = False,
    force: bool = False,
    config: HermesConfig | None = None,
) -> ExportedFile:
    """``/save md|qmd|html|json|jsonl``: write one session to ``path`` (a file, or a directory).

    ``json``/``jsonl`` are backups of every stored row and are refused with
    ``GuardError(code=4131)`` above ``sessions.max_export_messages``; md/html hold the display
    history. An existing file is refused (``ValidationError`` naming it) unless ``force``, and
    then keeps its permissions; in a directory a new name is picked (``-2``, ``-3``, ...), so an
    earlier save is never overwritten. Returns the written file's name, message count, SHA-256
    and display version.
    """
    conn = _connection(engine_or_conn)
    opts = ExportOptions(
        fmt=fmt, redact=redact, max_messages=max_export_messages(config), at=round(time.time(), 3)
    )
    check_options(opts)
    target = Path(path).expanduser()
    into_dir = target.is_dir()
    if not into_dir and not force and os.path.lexists(target):
        raise _exists_error(target)
    with read_transaction(conn):
        title = _titles(conn, [session_id], redact_secrets=redact)[session_id]
        stem = file_stem(session_id, title)
        version = display_version(conn, session_id)
        data, count = render_bytes(conn, session_id, opts)
        lineage = lineage_of(conn, session_id)
    if into_dir:
        target, sha = _save_new(target, stem, opts.extension(), data)
    else:
        private_dir(target.parent)
        sha = _write(target, [data], replace=force)
    return ExportedFile(
        file=str(target), session_id=session_id, title=title, format=fmt, only=None,
        messages=count, lineage=lineage, sha256=sha, display_version=version, redacted=redact,
        exported_at=opts.at,
    )  # fmt: skip
