"""``hermes chat`` (and the root ``hermes``): start or resume a session, then chat.

Interactive on a TTY; one message with ``-q``; one-shot runs (``--oneshot``, ``-Q``, ``-z``, or
``-q`` when stdio is not a TTY) are recorded with source ``oneshot`` unless ``--source`` says
otherwise. The heavy imports (engine, responders) happen only here, inside functions.

An interactive resume reaches its first prompt on the read side alone (click, apsw, rich for the
recap): the write side is opened, ``SessionResumed`` recorded and the chat built on a thread
started just before the prompt and joined before the first turn, command or exit.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hermes_es.cli.base import Hermes, check_decoded, get_hermes, lenient_stdin
from hermes_es.cli.root import chat_options
from hermes_es.errors import HermesError, HolderError, UsageError, ValidationError
from hermes_es.terminal_text import echo

if TYPE_CHECKING:
    import apsw

    from hermes_es.commands.chat import Chat
    from hermes_es.commands.engine import SessionEngine
    from hermes_es.commands.holders import Holder, SessionTakenOverError
    from hermes_es.config import HermesConfig
    from hermes_es.responders.base import ChatMessage, OnDelta, Responder, TurnResult


def err(message: str) -> None:
    """Print a status line on stderr (made terminal-safe)."""
    echo(message, err=True)


def resume_hint(session_id: str) -> str:
    """How to come back to a session."""
    return f"Session: {session_id}\nResume with: hermes --resume {session_id}"


TAKEN_OVER_NEXT = "/new or /resume to continue elsewhere"


def taken_over_notice(exc: SessionTakenOverError, what: str, *, next_step: str = "") -> str:
    """``this session was taken over by pid N (hermes -r …); <what> — <next step>``."""
    tail = f" — {next_step}" if next_step else ""
    return f"{exc.message}; {what}{tail}"


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
        tools: Sequence[dict[str, Any]] = (),
        on_delta: OnDelta | None = None,
        cancel: threading.Event | None = None,
    ) -> TurnResult:
        """Answer the window."""
        return self.real().respond(
            system_prompt,
            messages,
            model=model,
            reasoning=reasoning,
            tools=tools,
            on_delta=on_delta,
            cancel=cancel,
        )

    def summarize(self, messages: list[ChatMessage]) -> str:
        """Compaction summary."""
        return self.real().summarize(messages)


PROMPT_FIRST_S = 0.01
"""How long deferred resume work waits, so the main thread reaches ``input()`` first."""


class Deferred:
    """Work a resume defers past its first prompt: run on a thread started before the prompt
    and joined before the first turn, command or exit. An error on the thread is raised again
    at the join. The thread is not a daemon, so a process that exits right after the prompt
    still waits for it (the resume is recorded either way)."""

    def __init__(self, work: Callable[[], None]) -> None:
        self._work = work
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # handed to the joining thread
            self._error = exc

    def _thread_main(self) -> None:
        from hermes_es.commands.chat import block_interrupts

        block_interrupts()  # Ctrl-C at the prompt must reach the main thread's input()
        # Give the GIL back at once: the main thread is about to draw the prompt, and would
        # otherwise wait a whole switch interval (5 ms) for this thread to let go of it.
        time.sleep(PROMPT_FIRST_S)
        self._run()

    def start(self) -> None:
        """Start the thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._thread_main, name="hermes-resume")
            self._thread.start()

    def join(self) -> None:
        """Wait for the work (running it here when it never started); re-raise its error."""
        if self._thread is None:
            self._run()
        else:
            self._thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise error


class ChatApp:
    """Everything one ``hermes`` chat run holds: store, config, responder, the current chat.

    The write side (engine, hence eventsourcing) is opened on first use. An interactive resume
    reads what it shows from the read side and defers ``record_resume`` and building the chat to
    a ``Deferred``; ``engine`` and ``chat`` wait for it (``settle``) before they are used.
    """

    def __init__(self, hermes: Hermes, *, source: str, model: str | None) -> None:
        from hermes_es.prompts.tools import tools_for_toolsets

        self.hermes = hermes
        loaded = hermes.config()
        self.config: HermesConfig = loaded.config
        self.raw_config = loaded.raw
        self.source = source
        self.model_override = model
        self.responder = LazyResponder(loaded.raw)
        self.tools = tools_for_toolsets(self.config.toolsets)
        self.read_only = False
        self._terminal: str | None = None
        self._chat: Chat | None = None
        self._session_id = ""
        self._deferred: Deferred | None = None
        self._reader: apsw.Connection | None = None
        self._holder = contextlib.ExitStack()
        self._lease: Holder | None = None
        self.taken_over: SessionTakenOverError | None = None
        """Set once another process took the current session over (the chat is read-only)."""
        self._started: set[str] = set()
        """Sessions this run started (only those are discarded when left unused)."""

    # -- handles -----------------------------------------------------------------------------

    @property
    def engine(self) -> SessionEngine:
        """The write side (after any deferred resume work has finished)."""
        self.settle()
        return self.hermes.engine()

    @property
    def chat(self) -> Chat | None:
        """The current chat (after any deferred resume work has finished)."""
        self.settle()
        return self._chat

    @property
    def session_id(self) -> str:
        """The current session id, known before a deferred resume has finished."""
        chat = self._chat
        return chat.session_id if chat is not None else self._session_id

    @property
    def terminal(self) -> str | None:
        """This terminal's breadcrumb key (computed on first use)."""
        if self._terminal is None:
            from hermes_es.terminal import stdin_tty_name, terminal_key

            self._terminal = terminal_key(os.environ, stdin_tty_name()) or ""
        return self._terminal or None

    def reader(self) -> apsw.Connection:
        """A light read connection (no eventsourcing); the write side's while state.db is new."""
        if self._reader is None:
            backend = self.hermes.backend
            if not backend.exists():
                return self.engine.store.connection()
            self._reader = backend.light_reader()
        return self._reader

    def settle(self) -> None:
        """Wait for deferred resume work; its error is raised here (once)."""
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            deferred.join()

    def preload(self) -> None:
        """Call just before a prompt: start any deferred resume work on its thread (which then
        preloads the context window itself), else preload the current chat's window."""
        if self._deferred is not None:
            self._deferred.start()
        elif self._chat is not None:
            self._chat.start_preload()

    # -- sessions ----------------------------------------------------------------------------

    def _hold(self, session_id: str, kind: str) -> None:
        """Register this process as a live chat (or viewer) of ``session_id``."""
        from hermes_es.commands.holders import register_holder

        self._holder.close()
        self._holder = contextlib.ExitStack()
        self._lease = None
        self._lease = self._holder.enter_context(
            register_holder(self.hermes.db_path, kind, session_id)
        )

    # -- take-over -----------------------------------------------------------------------------

    def guard(self) -> None:
        """Before every write: raise ``SessionTakenOverError`` (and turn read-only) when another
        process has taken this chat's session over (it marks this process's lease)."""
        from hermes_es.commands.holders import SessionTakenOverError, check_taken_over
        from hermes_es.commands.resume import WRITER_KIND

        if self.taken_over is not None:
            raise self.taken_over
        lease = self._lease
        if lease is None or lease.kind != WRITER_KIND:
            return
        try:
            check_taken_over(lease)
        except SessionTakenOverError as exc:
            self._become_read_only(exc)
            raise

    def check_taken_over(self) -> SessionTakenOverError | None:
        """The take-over of the current session, if any (the chat turns read-only then)."""
        from hermes_es.commands.holders import SessionTakenOverError

        try:
            self.guard()
        except SessionTakenOverError as exc:
            return exc
        return None

    def _become_read_only(self, exc: SessionTakenOverError) -> None:
        """Stop writing: keep watching the session as a viewer, not as its writer."""
        from hermes_es.commands.resume import VIEWER_KIND

        self.taken_over = exc
        self.read_only = True
        if self._lease is not None and self._lease.session_id:
            self._hold(self._lease.session_id, VIEWER_KIND)

    def _crumb(self, session_id: str) -> None:
        from hermes_es.terminal import write_breadcrumb

        if self.terminal:
            write_breadcrumb(self.hermes.dir, self.terminal, session_id)

    def _build_chat(
        self,
        engine: SessionEngine,
        session_id: str,
        *,
        model: str,
        reasoning: str | None,
        workspace: Path,
    ) -> Chat:
        from hermes_es.cli.repl import notify
        from hermes_es.commands.chat import Chat

        chat = Chat(
            engine,
            session_id,
            responder=self.responder,
            config=self.config,
            profile_dir=self.hermes.dir,
            tools=self.tools,
            model=model,
            reasoning=reasoning,
            workspace=workspace,
            notify=notify,
            guard=self.guard,
        )
        self._chat = chat
        self._session_id = session_id
        if not self.read_only:
            self._crumb(session_id)
        return chat

    def new_session(
        self,
        title: str = "",
        *,
        source: str | None = None,
        parent_id: str = "",
        parent_kind: str = "",
    ) -> Chat:
        """Start a fresh session (``/new [NAME]``, ``/reset``) in the current directory; a
        failure (a taken title) changes nothing, the current chat included."""
        from hermes_es.commands.resume import WRITER_KIND
        from hermes_es.config import config_fingerprint

        model = self.model_override or self.config.model.name
        engine = self.engine
        sid = engine.start_session(
            source or self.source,
            parent_id=parent_id,
            parent_kind=parent_kind,
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
        self._started.add(sid)
        self.read_only = False
        self.taken_over = None
        self._hold(sid, WRITER_KIND)
        return self._build_chat(engine, sid, model=model, reasoning=None, workspace=Path.cwd())

    def resume_session(
        self,
        session_id: str,
        *,
        conflict: str | None,
        interactive: bool,
        restore: bool,
        pin_dir: str | None,
        defer: bool = False,
    ) -> None:
        """Resume ``session_id``: settle a live-chat conflict, pick up config, restore the cwd.

        With ``defer`` (an interactive resume) this reads only the read side; registering as a
        live chat, recording the resume and building the chat are ``Deferred`` work that
        ``preload`` starts on a thread just before the first prompt; ``chat``, ``engine`` and
        ``settle`` wait for it.
        """
        from hermes_es.commands.resume import (
            VIEWER_KIND,
            WRITER_KIND,
            live_writers,
            recorded_cwd,
            restore_cwd,
            take_over,
        )

        self.settle()
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
        self.taken_over = None
        if choice == "take-over" and holders:
            # Mark the other chats before recording anything: their next write stops there.
            for taken in take_over(self.hermes.db_path, session_id):
                err(f"↪ took over session {session_id} from {taken}; it is read-only now")
        if choice == "fork":
            from hermes_es.commands.chat import fork_session

            session_id = fork_session(self.engine, session_id, source=self.source)
            err(f"↪ forked a branch: {session_id}")
        pin_here = os.getcwd() if pin_dir is not None and not self.read_only else None
        model = reasoning = None
        if not defer:
            model, reasoning = self._record(session_id, pin_here)
        if pin_here is not None:
            err(f"↪ workspace pinned to {pin_here}")
        elif restore and not self.read_only:
            _, message = restore_cwd(recorded_cwd(self.reader(), session_id))
            if message:
                err(message)
        kind = VIEWER_KIND if self.read_only else WRITER_KIND
        workspace = Path.cwd()
        if not defer:
            self._hold(session_id, kind)
            self._build_chat(
                self.hermes.engine(),
                session_id,
                model=self.model_override or model or "",
                reasoning=reasoning,
                workspace=workspace,
            )
            return

        def work() -> None:
            self._hold(session_id, kind)
            model, reasoning = self._record(session_id, pin_here)
            chat = self._build_chat(
                self.hermes.engine(),
                session_id,
                model=self.model_override or model or "",
                reasoning=reasoning,
                workspace=workspace,
            )
            chat.start_preload()

        self._chat = None
        self._session_id = session_id
        self._deferred = Deferred(work)

    def _record(self, session_id: str, pin_here: str | None) -> tuple[str | None, str | None]:
        """Record the resume (unless read-only) and pin the workspace; returns (model,
        reasoning). Runs on the deferred thread for an interactive resume."""
        from hermes_es.commands.resume import record_resume

        if self.read_only:
            return None, None
        engine = self.hermes.engine()
        resumed = record_resume(engine, session_id, self.config)
        if pin_here is not None and resumed.cwd != pin_here:
            engine.change_workspace(session_id, pin_here)
        return resumed.model, resumed.reasoning

    def discard_if_unused(self, session_id: str) -> bool:
        """Remove a session this run started when it is left without a message (a chat opened
        and closed leaves nothing behind); True when it was removed."""
        if session_id not in self._started or self.read_only:
            return False
        if self.check_taken_over() is not None:
            return False
        from hermes_es.commands.discard import discard_if_unused

        with contextlib.suppress(HermesError):
            return discard_if_unused(self.engine.store, session_id)
        return False

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
        """Wait for deferred resume work, then release the live-chat registration."""
        try:
            self.settle()
        finally:
            self._holder.close()
            if self._reader is not None:
                self._reader.close()
                self._reader = None


def _conflict_choice(options: dict[str, Any]) -> str | None:
    """The live-chat conflict choice the flags make; more than one is a usage error."""
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
        given = " and ".join(f"--{name}" for name in chosen)
        raise UsageError(f"choose one of --take-over, --fork, --read-only (got {given})")
    return chosen[0] if chosen else None


def _is_tty() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def run_from_options(ctx: click.Context, options: dict[str, Any]) -> None:
    """Run a chat from the root or ``chat`` options."""
    hermes = get_hermes(ctx)
    conflict = _conflict_choice(options)  # conflicting flags are a usage error, resume or not
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
        lenient_stdin()
        text = check_decoded(sys.stdin.read(), "the message on standard input")
        if not text.strip():
            raise ValidationError("no message: pass -q TEXT, or run hermes in a terminal")
    if text is not None and not text.strip():
        raise ValidationError("empty message: nothing to send (and no session was started)")
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
    if _through_gateway(
        hermes,
        options,
        text=text,
        quiet=quiet,
        source=source,
        title=title,
        resume_ref=resume_ref,
        interactive=interactive,
    ):
        return
    app = ChatApp(hermes, source=source, model=options.get("model"))
    try:
        _open_chat(app, conflict, resume_ref, title, interactive, in_dir, options)
        if interactive:
            from hermes_es.cli.repl import run_repl

            run_repl(app, recap=_resuming(options, resume_ref))
            return
        chat = app.chat
        assert chat is not None
        if text is None:
            err(resume_hint(chat.session_id))
            return
        if app.read_only:
            raise UsageError("a read-only attach cannot send a message; drop --read-only")
        from hermes_es.cli.repl import StreamRenderer

        render = StreamRenderer()  # reply deltas as they arrive, tool calls and results
        try:
            outcome = chat.send(text, on_event=render)
        except HermesError as exc:
            render.finish_line()
            taken = app.taken_over
            if taken is None or exc is not taken:
                # the message was recorded: say where it is and how to come back to it
                err(resume_hint(chat.session_id))
                raise
            if taken.reply and not render.drew_reply:
                echo(taken.reply)  # shown, not recorded: nothing the responder said is lost
            what = (
                "the reply above was not recorded" if taken.reply else "your message was not sent"
            )
            raise HolderError(taken_over_notice(taken, what), subject=chat.session_id) from exc
        finally:
            # A finite run is over: end it (non-destructive; its next message reopens it),
            # so retention and prune treat it like any closed chat; a session taken over by
            # another process is no longer this run's to end.
            if app.check_taken_over() is None:
                with contextlib.suppress(HermesError):
                    app.engine.end_session(chat.session_id, "run_complete")
        for note in outcome.attachments:
            err(f"📎 {note}")
        if render.drew_reply:
            render.finish_line()
        else:
            echo(outcome.reply)
        if not quiet:
            err(resume_hint(chat.session_id))
    finally:
        try:
            if app.session_id:
                app.discard_if_unused(app.session_id)
            _sweep_on_the_way_out(app)
        finally:
            app.close()


def _sweep_on_the_way_out(app: ChatApp) -> None:
    """Run the ``sessions.auto_archive`` idle sweep, at most once a day, when a chat ends."""
    idle_days = app.config.sessions.auto_archive
    if idle_days <= 0 or app.read_only:
        return
    from hermes_es.commands.archive import maybe_sweep

    with contextlib.suppress(HermesError):
        maybe_sweep(app.engine, app.hermes.dir / ".auto-archive-sweep", idle_days)


def _resuming(options: dict[str, Any], resume_ref: str | None) -> bool:
    return options.get("continue_") is not None or resume_ref is not None


def _through_gateway(hermes: Hermes, options: dict[str, Any], **chat: Any) -> bool:
    """With a gateway running for the profile, run the chat through it; False: run embedded."""
    if options.get("read_only") or options.get("take_over") or options.get("fork"):
        return False  # attach modes of embedded chats
    from hermes_es.cli.team import team_gateway

    handle = team_gateway(hermes)  # the team's live owner when gateway.team_homes is set
    if handle is None:
        return False
    from hermes_es.cli.gateway_chat import run_via_gateway

    run_via_gateway(
        hermes,
        handle,
        continue_name=options.get("continue_"),
        in_dir=options.get("in_dir"),
        model=options.get("model"),
        **chat,
    )
    return True


def _open_chat(
    app: ChatApp,
    conflict: str | None,
    resume_ref: str | None,
    title: str,
    interactive: bool,
    in_dir: str | None,
    options: dict[str, Any],
) -> None:
    """Start a new session or resume the one the options name (deferred when interactive)."""
    from hermes_es.commands.resume import pick_session

    continue_name = options.get("continue_")
    if continue_name is None and resume_ref is None:
        app.new_session(title)
        return
    picked = pick_session(
        app.reader(),
        continue_name=continue_name,
        resume_ref=resume_ref,
        in_dir=os.getcwd() if in_dir is not None else None,
        breadcrumb_home=app.hermes.dir,
        # only a bare -c reads the breadcrumb: skip computing the terminal key otherwise
        terminal=app.terminal if continue_name is not None else None,
        terminal_continue=app.config.session.terminal_continue,
    )
    app.resume_session(
        picked.session_id,
        conflict=conflict,
        interactive=interactive,
        restore=not options.get("no_restore_cwd") and in_dir is None,
        pin_dir=in_dir,
        defer=interactive,
    )


@click.command("chat")
@chat_options
@click.pass_context
def chat_cmd(ctx: click.Context, /, **options: Any) -> None:
    """Chat: interactively on a terminal, or once with -q TEXT (--oneshot, -Q for scripts).

    Example: hermes chat -q "hello" --oneshot
    """
    run_from_options(ctx, options)
