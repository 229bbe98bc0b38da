"""Shared CLI plumbing: error mapping, the per-invocation context, JSON and time rendering."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import apsw
import click
import msgspec

from hermes_es.errors import HermesError, ValidationError
from hermes_es.home import hermes_home, profile_dir
from hermes_es.terminal_text import clean, echo

if TYPE_CHECKING:
    from hermes_es.commands.engine import SessionEngine
    from hermes_es.config import LoadedConfig
    from hermes_es.store.backend import StoreBackend


MAX_INT = 2**63 - 1
"""The largest integer SQLite stores: the upper bound of every integer option."""


class Count(click.IntRange):
    """A whole-number option from ``min`` up to the largest integer SQLite stores; anything
    outside is a usage error (exit 2) naming the option, never an overflow deeper down."""

    name = "integer"

    def __init__(self, min: int = 0) -> None:
        super().__init__(min=min, max=MAX_INT)

    def _describe_range(self) -> str:
        return f"x>={self.min} (and at most {MAX_INT})"


EXIT_BROKEN_PIPE = 141
"""Exit code when the reader of stdout went away (``| head``): what a shell reports for a
process stopped by SIGPIPE, printed nowhere."""


class HermesCommandError(click.ClickException):
    """A HermesError surfaced by a command: ``Error: …`` on stderr and its exit code."""

    def __init__(self, error: HermesError) -> None:
        super().__init__(error.message)
        self.exit_code = error.exit_code  # type: ignore[misc]


def invalid_utf8_argument(args: list[str]) -> str | None:
    """The first argument that was not valid UTF-8 (Python keeps such bytes as lone
    surrogates), shown with its bad bytes as ``\\xff``; None when every argument is valid."""
    for arg in args:
        if any("\udc80" <= ch <= "\udcff" for ch in arg):
            shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            return clean(shown)
    return None


def lenient_stdin() -> None:
    """Read stdin keeping invalid UTF-8 bytes as lone surrogates (so ``check_decoded`` can
    name them) instead of raising a ``UnicodeDecodeError`` traceback."""
    reconfigure = getattr(sys.stdin, "reconfigure", None)
    if reconfigure is not None:
        with contextlib.suppress(ValueError, OSError):
            reconfigure(errors="surrogateescape")


def check_decoded(text: str, what: str) -> str:
    """``text`` read through ``lenient_stdin``; a ``ValidationError`` naming the first byte
    that was not valid UTF-8 and where it was."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = ord(text[exc.start]) - 0xDC00
        shown = f"byte 0x{byte:02x}" if 0x80 <= byte <= 0xFF else "a lone surrogate"
        raise ValidationError(
            f"{what} is not valid UTF-8 ({shown} at character {exc.start}); nothing was sent",
            subject=what,
        ) from None
    return text


def _quiet_broken_pipe() -> NoReturn:
    """The reader of stdout is gone: point stdout at /dev/null so the final flush cannot
    complain, and exit without a word."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.exit(EXIT_BROKEN_PIPE)


class PipeClosed(Exception):
    """The reader of standard output went away (``| head``): stop quietly."""


class HermesGroup(click.Group):
    """A click group that turns expected failures into clean errors, never tracebacks."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run the CLI; every error line is made terminal-safe and ``| head`` exits quietly.

        Arguments that are not valid UTF-8 are a usage error (exit 2) before anything runs.
        """
        if not kwargs.get("standalone_mode", True):
            return super().main(*args, **kwargs)
        argv = kwargs.get("args", args[0] if args else None)
        bad = invalid_utf8_argument(list(sys.argv[1:] if argv is None else argv))
        if bad is not None:
            click.echo(f"Error: argument '{bad}' is not valid UTF-8; nothing was done", err=True)
            sys.exit(2)
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.ClickException as exc:
            exc.message = clean(exc.message)  # type: ignore[misc]
            try:
                exc.show()
            except BrokenPipeError:
                _quiet_broken_pipe()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except (BrokenPipeError, PipeClosed):
            _quiet_broken_pipe()
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_broken_pipe()
        # rv is an exit code only when it came from ctx.exit(code); commands return None
        sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise PipeClosed from exc  # not an OSError: click must not turn it into exit 1
        except HermesError as exc:
            raise HermesCommandError(exc) from exc
        except apsw.BusyError as exc:
            raise click.ClickException(
                "state.db stayed locked by another process; nothing was changed;"
                " try again ('hermes doctor' lists who holds it)"
            ) from exc
        except apsw.Error as exc:
            where = ctx.find_root().obj
            path = where.backend.location if isinstance(where, Hermes) else "state.db"
            raise click.ClickException(f"{path}: {exc}") from exc
        except OSError as exc:
            target = f": {exc.filename}" if exc.filename else ""
            raise click.ClickException(f"{exc.strerror or exc}{target}") from exc
        except Exception as exc:
            if not _is_store_error(exc):
                raise
            where = ctx.find_root().obj
            path = where.backend.location if isinstance(where, Hermes) else "the store"
            raise click.ClickException(f"{path}: {' '.join(str(exc).split())}") from exc


def _is_store_error(exc: Exception) -> bool:
    """A failure the store reported that no command turned into a HermesError (eventsourcing's
    persistence errors, a server's psycopg errors): an error line naming the store, not a
    traceback. Checked through ``sys.modules``, so the read path imports neither."""
    for module, name in (("eventsourcing.persistence", "PersistenceError"), ("psycopg", "Error")):
        loaded = sys.modules.get(module)
        kind = getattr(loaded, name, None) if loaded is not None else None
        if isinstance(kind, type) and isinstance(exc, kind):
            return True
    return False


class LazyGroup(HermesGroup):
    """A group whose subcommands are imported only when invoked (fast start for every command).

    ``lazy`` maps a command name to ``"module:attribute"``.
    """

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            import importlib

            module_name, attr = self.lazy[cmd_name].split(":")
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name != module_name:
                    raise
                return None
            command = getattr(module, attr)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy[cmd_name]} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


class Hermes:
    """What every command needs: where the profile lives, and lazily opened store handles."""

    def __init__(self, home: Path, profile: str | None, store: str | None = None) -> None:
        self.home = home
        self.profile = profile
        self.dir = profile_dir(home, profile)
        self.db_path = self.dir / "state.db"
        """The profile's state.db: the default store, and where holder leases are kept."""
        self.store_option = store
        self._backend: StoreBackend | None = None
        self._engine: SessionEngine | None = None
        self._conn: apsw.Connection | None = None
        self._light: apsw.Connection | None = None
        self._config: LoadedConfig | None = None

    @classmethod
    def from_env(cls, profile: str | None, store: str | None = None) -> Hermes:
        """From HERMES_HOME (or ~/.hermes), an optional profile name and ``--store``."""
        return cls(hermes_home(os.environ), profile, store)

    @property
    def backend(self) -> StoreBackend:
        """The store: ``--store``, $HERMES_STORE_URL, config.yaml ``store.url``, else state.db."""
        if self._backend is None:
            from hermes_es.store.backend import open_backend, resolve_target

            target = resolve_target(
                self.db_path, self.dir / "config.yaml", option=self.store_option
            )
            self._backend = open_backend(target, lease_path=self.db_path)
        return self._backend

    def engine(self) -> SessionEngine:
        """The write-side engine (imports eventsourcing; only write commands call this)."""
        if self._engine is None:
            from hermes_es.aggregates.validation import DEFAULT_MAX_MESSAGE_BYTES
            from hermes_es.commands.engine import SessionEngine

            try:
                limit = self.config().config.sessions.max_message_bytes
            except HermesError:  # a broken config.yaml is doctor's to report, not a write's
                limit = DEFAULT_MAX_MESSAGE_BYTES
            self._engine = SessionEngine(self.backend, actor=actor_name(), max_message_bytes=limit)
        return self._engine

    def reader(self) -> apsw.Connection:
        """A connection for queries; a missing store means there are no sessions yet."""
        if self._conn is None:
            backend = self.backend
            backend.require()
            self._conn = backend.reader()
        return self._conn

    def light_reader(self) -> apsw.Connection:
        """The cheapest read connection (list, stats); closed with the rest at exit."""
        if self._light is None:
            backend = self.backend
            backend.require()
            self._light = backend.light_reader()
        return self._light

    def config(self) -> LoadedConfig:
        """The profile's config.yaml (defaults when absent)."""
        if self._config is None:
            from hermes_es.config import load_config

            self._config = load_config(self.dir / "config.yaml")
        return self._config

    def close(self) -> None:
        """Close whatever was opened."""
        if self._engine is not None:
            self._engine.close()
        for conn in (self._conn, self._light):
            if conn is not None:
                conn.close()


def actor_name() -> str:
    """The acting identity recorded on events written from this CLI."""
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or "local"
    return f"cli:{user}"


def get_hermes(ctx: click.Context) -> Hermes:
    """The Hermes object of this invocation (created on first use, closed at exit)."""
    root = ctx.find_root()
    obj = root.obj
    if not isinstance(obj, Hermes):
        params = root.params or {}
        obj = Hermes.from_env(params.get("profile"), params.get("store"))
        root.obj = obj
        root.call_on_close(obj.close)
    return obj


_JSON = msgspec.json.Encoder()


def echo_json(value: Any) -> None:
    """Print a value as one JSON document."""
    click.echo(msgspec.json.format(_JSON.encode(value), indent=2).decode())


def when(ts: float) -> str:
    """A local time for humans."""
    if not ts:
        return "-"
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def fail(message: str, code: int = 1) -> NoReturn:
    """Exit with ``Error: message`` on stderr (made terminal-safe)."""
    click.echo(f"Error: {clean(message)}", err=True)
    sys.exit(code)


def warn_unscrubbed(scrubbed: bool, hermes: Hermes) -> None:
    """After a committed delete whose scrub was blocked, say so and what finishes it."""
    if scrubbed:
        return
    if hermes.backend.kind != "sqlite":
        echo(
            "warning: deleted, but another connection to the database held a lock on the"
            " tables the delete rewrites, so the deleted text stays in their files until they"
            " are rewritten: the next delete does it, or an operator's VACUUM (FULL) of those"
            " tables (docs/postgres.md, 'Physical delete', names them and what else stays the"
            " operator's concern: WAL archives, replicas, backups)",
            err=True,
        )
        return
    from hermes_es.commands.holders import describe, live_holders

    holders = ", ".join(describe(h) for h in live_holders(hermes.db_path, exclude_self=True))
    echo(
        "warning: deleted, but another process still reads state.db"
        + (f" ({holders})" if holders else "")
        + ", so old copies of the pages stay on disk until it lets go; the scrub is recorded"
        " as pending ('hermes doctor' reports it) and finishes by itself as soon as that"
        " process lets go ('hermes sessions optimize' also finishes it)",
        err=True,
    )
