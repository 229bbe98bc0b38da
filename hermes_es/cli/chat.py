"""``hermes chat`` (and the root ``hermes``): start or resume a session, then chat.

Interactive on a TTY; one message with ``-q``; one-shot runs (``--oneshot``, ``-Q``, ``-z``, or
``-q`` when stdio is not a TTY) are recorded with source ``oneshot`` unless ``--source`` says
otherwise. The heavy imports (engine, responders) happen only here, inside functions.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hermes_es.cli.base import Hermes, get_hermes
from hermes_es.cli.root import chat_options
from hermes_es.errors import HermesError, UsageError, ValidationError

if TYPE_CHECKING:
    from hermes_es.commands.chat import Chat
    from hermes_es.commands.engine import SessionEngine
    from hermes_es.config import HermesConfig
    from hermes_es.responders.base import ChatMessage, Responder, TurnResult


def err(message: str) -> None:
    """Print a status line on stderr."""
    click.echo(message, err=True)


def resume_hint(session_id: str) -> str:
    """How to come back to a session."""
    return f"Session: {session_id}\nResume with: hermes --resume {session_id}"


class LazyResponder:
    """The configured responder, built on first use so the prompt shows before the HTTP client
    and responder modules are imported."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = config
        self._real: Responder | None = None
        self._lock = threading.Lock()

    def real(self) -> Responder:
        """The underlying responder (config errors surface here)."""
        with self._lock:
            if self._real is None:
                from hermes_es.responders import make_responder

                self._real = make_responder(self._config, os.environ)
            return self._real

    @property
    def name(self) -> str:
        """Responder kind."""
        return self.real().name

    @property
    def can_see_images(self) -> bool:
        """Whether images may be sent as they are."""
        return self.real().can_see_images

    def respond(
        self,
        system_prompt: str,
        messages: list[ChatMessage],
        *,
        model: str,
        reasoning: str | None = None,
    ) -> TurnResult:
        """Answer the window."""
        return self.real().respond(system_prompt, messages, model=model, reasoning=reasoning)

    def summarize(self, messages: list[ChatMessage]) -> str:
        """Compaction summary."""
        return self.real().summarize(messages)


class ChatApp:
    """Everything one ``hermes`` chat run holds: store, config, responder, the current chat."""

    def __init__(self, hermes: Hermes, *, source: str, model: str | None) -> None:
        from hermes_es.prompts.tools import tools_for_toolsets
        from hermes_es.terminal import stdin_tty_name, terminal_key

        self.hermes = hermes
        loaded = hermes.config()
        self.config: HermesConfig = loaded.config
        self.raw_config = loaded.raw
        self.source = source
        self.model_override = model
        self.engine: SessionEngine = hermes.engine()
        self.responder = LazyResponder(loaded.raw)
        self.tools = tools_for_toolsets(self.config.toolsets)
        self.terminal = terminal_key(os.environ, stdin_tty_name())
        self.chat: Chat | None = None
        self.read_only = False
        self._holder = contextlib.ExitStack()

    # -- sessions ----------------------------------------------------------------------------

    def _hold(self, session_id: str, kind: str) -> None:
        """Register this process as a live chat (or viewer) of ``session_id``."""
        from hermes_es.commands.holders import register_holder

        self._holder.close()
        self._holder = contextlib.ExitStack()
        self._holder.enter_context(register_holder(self.hermes.db_path, kind, session_id))

    def _crumb(self, session_id: str) -> None:
        from hermes_es.terminal import write_breadcrumb

        if self.terminal:
            write_breadcrumb(self.hermes.dir, self.terminal, session_id)

    def _open(self, session_id: str, *, model: str = "", reasoning: str | None = None) -> Chat:
        from hermes_es.cli.repl import notify
        from hermes_es.commands.chat import Chat
        from hermes_es.commands.resume import VIEWER_KIND, WRITER_KIND

        self._hold(session_id, VIEWER_KIND if self.read_only else WRITER_KIND)
        self.chat = Chat(
            self.engine,
            session_id,
            responder=self.responder,
            config=self.config,
            profile_dir=self.hermes.dir,
            tools=self.tools,
            model=model,
            reasoning=reasoning,
            workspace=Path.cwd(),
            notify=notify,
        )
        if not self.read_only:
            self._crumb(session_id)
        return self.chat

    def new_session(self, title: str = "") -> Chat:
        """Start a fresh session (``/new [NAME]``) in the current directory."""
        from hermes_es.config import config_fingerprint

        model = self.model_override or self.config.model.name
        sid = self.engine.start_session(
            self.source,
            title=title.strip(),
            profile=self.hermes.profile or "default",
            model=model,
            model_config={
                "provider": self.config.model.provider,
                "pickup": config_fingerprint(self.config),
            },
            launch_flags={"argv": sys.argv[1:]},
            tools=self.tools,
            cwd=os.getcwd(),
        )
        self.read_only = False
        return self._open(sid, model=model)

    def resume_session(
        self,
        session_id: str,
        *,
        conflict: str | None,
        interactive: bool,
        restore: bool,
        pin_dir: str | None,
    ) -> Chat:
        """Resume ``session_id``: settle a live-chat conflict, pick up config, restore the cwd."""
        from hermes_es.commands.chat import fork_session
        from hermes_es.commands.resume import live_writers, record_resume, restore_cwd

        holders = live_writers(self.hermes.db_path, session_id)
        choice = conflict or ""
        if holders and not choice:
            choice = self._ask_conflict(session_id, holders) if interactive else ""
            if not choice:
                raise HermesError(
                    f"session {session_id} is open in another live chat ({'; '.join(holders)}); "
                    "pass --read-only to watch it, --fork to branch it, or --take-over to "
                    "continue it here",
                    subject=session_id,
                )
        if choice == "quit":
            raise HermesError("resume cancelled", subject=session_id)
        self.read_only = choice == "read-only"
        if choice == "fork":
            session_id = fork_session(self.engine, session_id, source=self.source)
            err(f"↪ forked a branch: {session_id}")
        model = reasoning = None
        if not self.read_only:
            resumed = record_resume(self.engine, session_id, self.config)
            model, reasoning = resumed.model, resumed.reasoning
            if pin_dir is not None:
                here = os.getcwd()
                if resumed.cwd != here:
                    self.engine.change_workspace(session_id, here)
                err(f"↪ workspace pinned to {here}")
            elif restore:
                _, message = restore_cwd(resumed.cwd)
                if message:
                    err(message)
        return self._open(session_id, model=self.model_override or model or "", reasoning=reasoning)

    def _ask_conflict(self, session_id: str, holders: list[str]) -> str:
        """Ask what to do about a session another live chat holds."""
        err(f"Session {session_id} is open in another live chat: {'; '.join(holders)}")
        answer = click.prompt(
            "[r]ead-only attach, [f]ork a branch, [t]ake over, or [q]uit",
            type=click.Choice(["r", "f", "t", "q"]),
            default="r",
            err=True,
        )
        return {"r": "read-only", "f": "fork", "t": "take-over", "q": "quit"}[answer]

    def close(self) -> None:
        """Release the live-chat registration."""
        self._holder.close()


def _conflict_choice(options: dict[str, Any]) -> str | None:
    chosen = [
        name
        for name, flag in (
            ("take-over", "take_over"),
            ("fork", "fork"),
            ("read-only", "read_only"),
        )
        if options.get(flag)
    ]
    if len(chosen) > 1:
        raise UsageError(f"choose one of --take-over, --fork, --read-only (got {len(chosen)})")
    return chosen[0] if chosen else None


def _is_tty() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def run_from_options(ctx: click.Context, options: dict[str, Any]) -> None:
    """Run a chat from the root or ``chat`` options."""
    hermes = get_hermes(ctx)
    slash = (options.get("slash") or "").strip()
    title = ""
    resume_ref = options.get("resume")
    if slash:
        name, _, rest = slash.partition(" ")
        if name == "/new":
            title = rest.strip()
        elif name == "/resume" and rest.strip():
            resume_ref = rest.strip()
        else:
            raise UsageError(f"{name} is not available from the shell; try: hermes /new NAME")
    query = options.get("query")
    z_text = options.get("oneshot_text")
    quiet = bool(options.get("quiet") or z_text is not None)
    text = z_text if z_text is not None else query
    tty = _is_tty()
    interactive = text is None and sys.stdin.isatty()
    if text is None and not interactive and not slash:
        text = sys.stdin.read()
        if not text.strip():
            raise ValidationError("no message: pass -q TEXT, or run hermes in a terminal")
    oneshot = bool(options.get("oneshot") or quiet or (text is not None and not tty))
    source = options.get("source") or ("oneshot" if oneshot else "cli")
    in_dir = options.get("in_dir")
    if in_dir is not None:
        try:
            os.chdir(Path(in_dir).expanduser())
        except OSError as exc:
            raise ValidationError(
                f"--in {in_dir}: cannot change into it ({exc.strerror})", subject=in_dir
            ) from exc
    app = ChatApp(hermes, source=source, model=options.get("model"))
    try:
        chat = _open_chat(app, options, resume_ref, title, interactive, in_dir)
        if interactive:
            from hermes_es.cli.repl import run_repl

            run_repl(app, recap=_resuming(options, resume_ref))
            return
        if text is None:
            err(resume_hint(chat.session_id))
            return
        if app.read_only:
            raise UsageError("a read-only attach cannot send a message; drop --read-only")
        outcome = chat.send(text)
        for note in outcome.attachments:
            err(f"📎 {note}")
        click.echo(outcome.reply)
        if not quiet:
            err(resume_hint(chat.session_id))
    finally:
        app.close()


def _resuming(options: dict[str, Any], resume_ref: str | None) -> bool:
    return options.get("continue_") is not None or resume_ref is not None


def _open_chat(
    app: ChatApp,
    options: dict[str, Any],
    resume_ref: str | None,
    title: str,
    interactive: bool,
    in_dir: str | None,
) -> Chat:
    """Start a new session or resume the one the options name."""
    from hermes_es.commands.resume import pick_session

    continue_name = options.get("continue_")
    if continue_name is None and resume_ref is None:
        return app.new_session(title)
    picked = pick_session(
        app.engine.store.connection(),
        continue_name=continue_name,
        resume_ref=resume_ref,
        in_dir=os.getcwd() if in_dir is not None else None,
        breadcrumb_home=app.hermes.dir,
        terminal=app.terminal,
        terminal_continue=app.config.session.terminal_continue,
    )
    return app.resume_session(
        picked.session_id,
        conflict=_conflict_choice(options),
        interactive=interactive,
        restore=not options.get("no_restore_cwd") and in_dir is None,
        pin_dir=in_dir,
    )


@click.command("chat")
@chat_options
@click.pass_context
def chat_cmd(ctx: click.Context, /, **options: Any) -> None:
    """Chat: interactively on a terminal, or once with -q TEXT (--oneshot, -Q for scripts).

    Example: hermes chat -q "hello" --oneshot
    """
    run_from_options(ctx, options)
