"""The interactive chat loop and its slash commands, with the resume recap panel.

The recap is read on the read side and drawn with only rich's console, panel and text modules
(its title is a ``Text``, so no markup or emoji tables are loaded), so a resume shows it before
the write side is opened.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hermes_es.errors import HermesError, UsageError
from hermes_es.terminal_text import clean, echo, fit, one_line, pad

if TYPE_CHECKING:
    from hermes_es.cli.chat import ChatApp
    from hermes_es.commands.chat import Chat, TurnOutcome
    from hermes_es.commands.holders import SessionTakenOverError
    from hermes_es.commands.turn_events import TurnEvent
    from hermes_es.queries.recap import Recap

PROMPT = "hermes> "
HELP = """Commands:
  /new [NAME]        start a fresh session (optionally titled)
  /reset [NAME]      start a new conversation linked to this one (parent link: reset)
  /title NAME        set this session's title
  /compress          archive older turns behind a summary
  /rewind [N]        remove the last N turns (default 1)
  /save FMT [PATH]   save as md, html or json (an existing file needs --force)
  /sessions          recent sessions
  /resume NAME       switch to another session
  /reasoning LEVEL   set the reasoning effort (none, minimal, low, medium, high, xhigh)
  /attach PATH       attach a file to the next message
  /recap             show the recap again
  /exit              leave (the session id is printed)"""


def notify(message: str) -> None:
    """A status line from the chat (reloads, recreations)."""
    echo(f"↪ {message}", err=True)


def render_recap(recap: Recap, *, minimal: bool) -> None:
    """Draw the recap: a rich panel, or one line when ``display.resume_display: minimal``."""
    title = f' "{one_line(recap.title)}"' if recap.title else ""
    if minimal:
        echo(f"↪ Resumed session {recap.session_id}{title} ({recap.total_messages} messages)")
        return
    from rich.console import Console
    from rich.panel import Panel
    from rich.text import Text

    body = Text()
    for index, line in enumerate(recap.lines):
        if index:
            body.append("\n")
        if line.role == "user":
            body.append("you: ", style="bold cyan")
        else:
            body.append("hermes: ", style="bold green")
        body.append(one_line(line.text))
        if line.tools_label:
            label = one_line(line.tools_label)
            body.append(f" {label}" if line.text else label, style="dim")
    if not recap.lines:
        body.append("(no messages yet)", style="dim")
    sid = one_line(recap.session_id)
    header = Text(f"Recap of {sid}{title} · last {recap.exchanges} exchanges")
    Console(highlight=False, emoji=False, soft_wrap=False).print(
        Panel(body, title=header, title_align="left", border_style="blue")
    )


def show_recap(app: ChatApp) -> None:
    """Draw the current session's recap (read side only: a deferred resume may be running)."""
    from hermes_es.queries.recap import session_recap

    recap = session_recap(app.reader(), app.session_id)
    render_recap(recap, minimal=app.config.display.resume_display == "minimal")


def _sessions(app: ChatApp, _: str) -> None:
    from hermes_es.commands.resume import picker_sessions

    rows = picker_sessions(app.engine.store.connection(), limit=20)
    if not rows:
        click.echo("(no sessions)")
    for row in rows:
        marker = "*" if app.chat is not None and row.session_id == app.chat.session_id else " "
        title = pad(fit(one_line(row.title or "-"), 24), 24)
        echo(f"{marker} {one_line(row.session_id)}  {title}  {fit(one_line(row.preview), 50)}")


def _end_current(app: ChatApp, reason: str) -> None:
    """End the session the chat is leaving (non-destructive: its next message reopens it);
    a session another process took over is left to that process."""
    chat = app.chat
    if chat is not None and not app.read_only and app.check_taken_over() is None:
        with contextlib.suppress(HermesError):
            app.engine.end_session(chat.session_id, reason)


def _switch_to_new(app: ChatApp, title: str, *, parent_kind: str = "") -> Chat:
    """Start the new session first (a taken title fails here, changing nothing), then end the
    one the chat leaves."""
    old = app.chat
    leaving = old.session_id if old is not None else ""
    writable = old is not None and not app.read_only and app.check_taken_over() is None
    source = "cli" if app.source == "oneshot" else app.source
    chat = app.new_session(
        title,
        source=source,
        parent_id=leaving if parent_kind else "",
        parent_kind=parent_kind,
    )
    app.source = source
    if writable:
        with contextlib.suppress(HermesError):
            app.engine.end_session(leaving, "new_session")
        if not parent_kind:  # a /reset keeps the session it links to, used or not
            app.discard_if_unused(leaving)
    return chat


def _new(app: ChatApp, arg: str) -> None:
    chat = _switch_to_new(app, arg)
    echo(f"New session {chat.session_id}" + (f' "{one_line(arg)}"' if arg else ""))


def _reset(app: ChatApp, arg: str) -> None:
    assert app.chat is not None
    before = app.chat.session_id
    chat = _switch_to_new(app, arg, parent_kind="reset")
    echo(f"Reset: new conversation {chat.session_id} (continues from {before})")


def _title(app: ChatApp, arg: str) -> None:
    assert app.chat is not None
    if not arg:
        raise UsageError("usage: /title NAME")
    app.chat.set_title(arg)
    echo(f'Title set: "{one_line(arg)}"')


def _compress(app: ChatApp, _: str) -> None:
    assert app.chat is not None
    before = app.chat.session_id
    out = app.chat.compress()
    if out.session_id != before:
        app._hold(out.session_id, "chat")
        app._crumb(out.session_id)
        click.echo(
            f"Compressed {out.archived} messages; continuing in {out.session_id} ({out.kept} kept)"
        )
    else:
        click.echo(f"Compressed {out.archived} messages in place ({out.kept} kept)")


def _rewind(app: ChatApp, arg: str) -> None:
    assert app.chat is not None
    if arg and not (arg.isdigit() and int(arg) > 0):
        raise UsageError(f"usage: /rewind [N] (N a positive number of turns, got {arg!r})")
    turns = int(arg) if arg else 1
    removed = app.chat.rewind(turns)
    click.echo(f"Rewound {turns} turn(s): {removed} messages left the context")


def _save(app: ChatApp, arg: str) -> None:
    from hermes_es.commands.export import save_session
    from hermes_es.errors import GuardError

    assert app.chat is not None
    words = arg.strip().split(" ")
    force = "--force" in words
    fmt, _, where = " ".join(w for w in words if w != "--force").partition(" ")
    fmt = fmt.strip().lower() or "md"
    if fmt not in ("md", "html", "json"):
        raise UsageError("usage: /save md|html|json [PATH] [--force]  (--force overwrites PATH)")
    target = Path(where.strip()).expanduser() if where.strip() else Path.cwd()
    try:
        saved = save_session(
            app.engine, app.chat.session_id, fmt, target, force=force, config=app.config
        )
    except GuardError as exc:
        echo(f"Error {exc.code}: {exc.message}", err=True)
        return
    echo(f"Saved {saved.messages} messages to {saved.file}")


def _resume(app: ChatApp, arg: str) -> None:
    from hermes_es.commands.resume import pick_session

    if not arg:
        raise UsageError("usage: /resume NAME")
    picked = pick_session(app.engine.store.connection(), resume_ref=arg)
    if app.chat is not None and picked.session_id != app.chat.session_id:
        _end_current(app, "switched")
    app.resume_session(
        picked.session_id, conflict=None, interactive=True, restore=True, pin_dir=None
    )
    show_recap(app)


def _reasoning(app: ChatApp, arg: str) -> None:
    assert app.chat is not None
    if not arg:
        click.echo(f"Reasoning: {app.chat.reasoning or 'default'}")
        return
    app.chat.set_reasoning(arg.strip().lower())
    click.echo(f"Reasoning set to {arg.strip().lower()}")


def _attach(app: ChatApp, arg: str) -> None:
    assert app.chat is not None
    if not arg:
        raise UsageError("usage: /attach PATH")
    import shlex

    parts = shlex.split(arg)
    for part in parts:
        app.chat.attach(Path(part))
    click.echo(f"Attached {len(parts)} file(s) to your next message")


def _recap(app: ChatApp, _: str) -> None:
    show_recap(app)


def _help(app: ChatApp, _: str) -> None:
    click.echo(HELP)


COMMANDS: dict[str, Callable[[ChatApp, str], None]] = {
    "/new": _new,
    "/reset": _reset,
    "/title": _title,
    "/compress": _compress,
    "/rewind": _rewind,
    "/save": _save,
    "/sessions": _sessions,
    "/resume": _resume,
    "/reasoning": _reasoning,
    "/attach": _attach,
    "/recap": _recap,
    "/help": _help,
}
WRITE_COMMANDS = frozenset({"/title", "/compress", "/rewind", "/reasoning", "/attach"})


def _taken_over(exc: SessionTakenOverError, what: str) -> None:
    """Say that the session was taken over, what did not happen, and where to go next."""
    from hermes_es.cli.chat import TAKEN_OVER_NEXT, taken_over_notice

    echo(taken_over_notice(exc, what, next_step=TAKEN_OVER_NEXT), err=True)


def _as_taken_over(app: ChatApp, exc: HermesError) -> SessionTakenOverError | None:
    """``exc`` when it is the take-over that just turned this chat read-only, else None."""
    taken = app.taken_over
    return taken if taken is not None and exc is taken else None


def terminal_text(text: str) -> str:
    """Model/tool text made safe to draw (:func:`hermes_es.terminal_text.clean`): control
    characters made visible, newlines and tabs kept."""
    return clean(text)


class StreamRenderer:
    """Draws a running turn from its turn events: reply text as it arrives, one dim line per
    tool call and result (on stderr)."""

    def __init__(self) -> None:
        self.open_line = False
        """Reply text was drawn without its closing newline yet."""
        self.drew_reply = False

    def __call__(self, event: TurnEvent) -> None:
        from hermes_es.commands.turn_events import ReplyDelta, ToolCallStarted

        if isinstance(event, ReplyDelta):
            click.echo(terminal_text(event.text), nl=False)
            self.open_line = not event.text.endswith("\n")
            self.drew_reply = True
            return
        self.finish_line()
        if isinstance(event, ToolCallStarted):
            args = event.arguments if len(event.arguments) <= 120 else event.arguments[:119] + "…"
            click.echo(f"⚙ {terminal_text(event.name)} {terminal_text(args)}", err=True)
        else:
            first = event.content.strip().splitlines()[0] if event.content.strip() else ""
            mark = "✗" if event.is_error else "→"
            click.echo(f"  {mark} {terminal_text(first[:120])}", err=True)

    def finish_line(self) -> None:
        """End a reply line left open by streaming."""
        if self.open_line:
            click.echo()
            self.open_line = False


def run_turn(chat: Chat, text: str, render: Callable[[TurnEvent], None]) -> TurnOutcome:
    """Run ``chat.send`` on a worker thread so Ctrl-C on the main thread cancels it: what
    arrived is kept (marked interrupted) and the complete turn is still recorded."""
    import threading

    from hermes_es.commands.chat import block_interrupts

    cancel = threading.Event()
    done = threading.Event()
    result: list[TurnOutcome] = []
    failure: list[BaseException] = []

    def work() -> None:
        block_interrupts()
        try:
            result.append(chat.send(text, on_event=render, cancel=cancel))
        except BaseException as exc:  # handed to the main thread
            failure.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=work, name="hermes-turn")
    worker.start()
    # Wait on an Event, not on join(): a join interrupted by Ctrl-C can report the thread
    # finished while it still runs.
    while True:
        try:
            while not done.wait(0.05):
                pass
            break
        except KeyboardInterrupt:
            cancel.set()
    worker.join()
    if failure:
        raise failure[0]
    return result[0]


def _say(app: ChatApp, text: str) -> None:
    """Send one message and draw the reply as it streams (errors keep the user's message and
    the loop; Ctrl-C keeps what arrived, marked interrupted)."""
    assert app.chat is not None
    if app.taken_over is not None:
        _taken_over(app.taken_over, "your message was not sent")
        return
    if app.read_only:
        click.echo("read-only: this chat only watches the session (use /exit)", err=True)
        return
    render = StreamRenderer()
    try:
        outcome = run_turn(app.chat, text, render)
    except HermesError as exc:
        render.finish_line()
        taken = _as_taken_over(app, exc)
        if taken is None:
            raise
        if taken.reply:  # the take-over came while the responder ran: show it, not recorded
            if not render.drew_reply:
                echo(taken.reply)
            _taken_over(taken, "the reply above was not recorded")
        else:
            _taken_over(taken, "your message was not sent")
        return
    render.finish_line()
    for note in outcome.attachments:
        echo(f"📎 {note}", err=True)
    if not render.drew_reply and outcome.reply:
        echo(outcome.reply)
    if outcome.interrupted:
        click.echo("(interrupted; what arrived is kept, marked interrupted)", err=True)


def run_repl(app: ChatApp, *, recap: bool) -> None:
    """Read messages and slash commands until ``/exit`` or end of input.

    A deferred resume starts on its thread just before the first prompt and is joined right
    after the first input line (or end of input), outside the per-command error handling: a
    resume that failed ends the run with its error, as it did before the prompt was drawn.
    """
    if recap:
        show_recap(app)
    mode = " (read-only)" if app.read_only else ""
    click.echo(f"Session {app.session_id}{mode}. /help for commands, /exit to leave.")
    try:
        _loop(app)
    finally:
        chat = app.chat
        if chat is not None:
            _end_current(app, "user_exit")
            if app.discard_if_unused(chat.session_id):
                click.echo("Nothing was said, so no session was kept.")
            else:
                click.echo(f"Session: {chat.session_id}")
                click.echo(f"Resume with: hermes --resume {chat.session_id}")


def _loop(app: ChatApp) -> None:
    """The read-eval loop; Ctrl-C during a turn interrupts the turn, not the chat."""
    from hermes_es.cli.base import check_decoded, lenient_stdin

    lenient_stdin()
    while True:
        app.preload()
        try:
            line = input(PROMPT)
        except (EOFError, KeyboardInterrupt):
            click.echo()
            break
        app.settle()
        try:
            check_decoded(line, "your input")
        except HermesError as exc:
            echo(f"Error: {exc.message}", err=True)
            continue
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            break
        try:
            if text.startswith("/") and text[1:2].isalpha():
                name, _, arg = text.partition(" ")
                handler = COMMANDS.get(name)
                if handler is None:
                    echo(f"Unknown command {name}; /help lists commands", err=True)
                elif app.taken_over is not None and name in WRITE_COMMANDS:
                    _taken_over(app.taken_over, f"{name} was not applied")
                elif app.read_only and name in WRITE_COMMANDS:
                    click.echo(f"read-only: {name} is not available", err=True)
                else:
                    handler(app, arg.strip())
            else:
                _say(app, text)
        except HermesError as exc:
            taken = _as_taken_over(app, exc)
            if taken is not None:
                _taken_over(taken, f"{text.partition(' ')[0]} was not applied")
            else:
                echo(f"Error: {exc.message}", err=True)
        except KeyboardInterrupt:
            click.echo(
                "\n(interrupted; your message is kept, the reply was not recorded)", err=True
            )
