"""The chat through a running gateway: ``hermes``, ``-c``, ``-r``, ``chat -q`` and slash commands.

The CLI only reads input and renders the session's event stream; the gateway admits, queues
and runs every turn. Live ``turn.stream`` items (reply deltas, tool calls, tool results) are
drawn by the embedded chat's renderer (:class:`hermes_es.cli.repl.StreamRenderer`), for this
terminal's turns and for those of any other client attached to the session; a resume draws the
embedded recap panel from the read side. Slash commands with a protocol method are forwarded;
the others say they are not available through the gateway.

The session is picked from the read side (like embedded mode), then attached with a ticket
from the control socket; nothing here opens state.db for writing. Two terminals on one
session both stay attached and see each other's turns. A connection that drops mid-turn
loses nothing: the gateway stores the outcome, and the CLI says how to resume. On a team
(``gateway.team_homes``, PostgreSQL) a chat whose connection drops re-attaches to the live
owner instead and replays what it missed (:func:`_reconnect`, :func:`_relink`); a submission
whose connection dropped, or that a gateway which no longer owns the profile refused, is sent
again to the live owner with the same submission id, so it is admitted once
(:func:`_submit`). A one-shot whose turn the takeover recorded unknown says so and how to
resolve it, and exits 3 (:class:`TurnUnknownError`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from hermes_es.errors import HermesError, ResponderError
from hermes_es.gateway.client import Connection, GatewayDropped, GatewayError, GatewayHandle
from hermes_es.terminal_text import clean, echo, fit, one_line, pad

if TYPE_CHECKING:
    from hermes_es.cli.base import Hermes
    from hermes_es.cli.repl import StreamRenderer

GATEWAY_HELP = """Commands (through the gateway):
  /new [NAME]        start a fresh session (optionally titled)
  /reset [NAME]      start a new conversation linked to this one (parent link: reset)
  /title NAME        set this session's title
  /sessions          recent sessions
  /resume NAME       switch to another session
  /recap             show the recap again
  /discard           resolve an unknown turn (queued messages run then)
  /exit              leave (the session id is printed)"""


def safe(text: str) -> str:
    """Text from models, tools and other users with terminal control characters made visible."""
    return clean(text)


def err(message: str) -> None:
    """A status line on stderr."""
    click.echo(message, err=True)


class DroppedMidTurnError(HermesError):
    """The gateway connection dropped while a turn was pending (its outcome will be stored)."""


class TurnUnknownError(HermesError):
    """The turn's gateway stopped while it ran: the new owner recorded it ``unknown``."""

    exit_code = 3


UNKNOWN_EXIT = TurnUnknownError.exit_code
"""Exit code of a one-shot whose turn ended ``unknown`` (docs/gateway-protocol.md)."""


def unknown_notice(session_id: str, turn: int) -> str:
    """What to tell the user about a turn a takeover recorded unknown, and how to resolve it."""
    return (
        f"turn {turn} of session {session_id} is unknown: the gateway running it stopped before"
        " it finished, so its model call or tools may have run but nothing of its answer was"
        " stored. Your message is kept; it is not sent again. Resolve it with: hermes sessions"
        f" resolve {session_id} --discard (or /discard in hermes --resume {session_id});"
        " messages queued behind it run then"
    )


def dropped_notice(session_id: str) -> str:
    """What to tell the user when the connection drops mid-turn (never: send it again)."""
    return (
        f"the connection to the gateway dropped while your message was being handled; the "
        f"gateway keeps it and stores the outcome. See it with: hermes sessions show "
        f"{session_id} (or resume: hermes --resume {session_id})"
    )


def _message_texts(params: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of the messages a stored event carries."""
    event = params.get("event") or {}
    kind = params.get("type")
    if kind == "hermes.message.appended":
        messages = [event.get("message") or {}]
    elif kind == "hermes.turn.appended":
        messages = list(event.get("messages") or [])
    else:
        return []
    out = []
    for m in messages:
        content = m.get("content", "")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        out.append((str(m.get("role", "")), str(content)))
    return out


def _pick(hermes: Hermes, options: dict[str, Any]) -> str | None:
    """The session to resume (None: a new one), chosen on the read side like embedded mode."""
    continue_name = options.get("continue_name")
    resume_ref = options.get("resume_ref")
    in_dir = options.get("in_dir")
    if continue_name is None and resume_ref is None and in_dir is None:
        return None
    from hermes_es.commands.resume import pick_session
    from hermes_es.terminal import stdin_tty_name, terminal_key

    picked = pick_session(
        hermes.reader(),
        continue_name=continue_name,
        resume_ref=resume_ref,
        in_dir=os.getcwd() if in_dir is not None else None,
        breadcrumb_home=hermes.dir,
        terminal=terminal_key(os.environ, stdin_tty_name()) if continue_name is not None else None,
        terminal_continue=hermes.config().config.session.terminal_continue,
    )
    return picked.session_id


def _crumb(hermes: Hermes, session_id: str) -> None:
    from hermes_es.terminal import stdin_tty_name, terminal_key, write_breadcrumb

    key = terminal_key(os.environ, stdin_tty_name())
    if key:
        write_breadcrumb(hermes.dir, key, session_id)


def _attach(
    conn: Connection, hermes: Hermes, options: dict[str, Any], create_id: str
) -> dict[str, Any]:
    """Resume the picked session, or create one with ``create_id`` (the same id on a retry:
    a creation the dead gateway committed answers with its session, no second one)."""
    sid = _pick(hermes, options)
    if sid is not None:
        summary: dict[str, Any] = conn.call("session.resume", {"ref": sid})
    else:
        summary = conn.call(
            "session.create",
            {
                "source": options["source"],
                "title": options.get("title") or "",
                "workspace": os.getcwd(),
                "model": options.get("model") or "",
                "create_id": create_id,
            },
        )
    _crumb(hermes, summary["session_id"])
    return summary


def _open(
    hermes: Hermes, handle: GatewayHandle, options: dict[str, Any]
) -> tuple[Connection, dict[str, Any]]:
    """Connect and attach. On a team, a gateway picked that died since, or that no longer owns
    the profile, is replaced by the live owner (waiting for a takeover)."""
    from hermes_es.cli.team import team_dirs
    from hermes_es.gateway.failover import TAKEOVER_WAIT_S, attach_owner

    conn: Connection | None = None
    create_id = uuid.uuid4().hex
    try:
        conn = handle.connect("cli")
        return conn, _attach(conn, hermes, options, create_id)
    except GatewayError as exc:
        if conn is not None:
            conn.close(wait=2.0)
        team = team_dirs(hermes)
        if not team or not (conn is None or _retriable(exc)):
            raise
    err("(that gateway is gone or no longer owns the profile; attaching through the live owner)")
    handle, conn = attach_owner(team, "cli", timeout=TAKEOVER_WAIT_S)
    try:
        return conn, _attach(conn, hermes, options, create_id)
    except BaseException:
        conn.close()
        raise


def run_via_gateway(hermes: Hermes, handle: GatewayHandle, **options: Any) -> None:
    """Run the chat the options ask for through the gateway."""
    conn, summary = _open(hermes, handle, options)
    try:
        sid = summary["session_id"]
        if summary.get("unknown"):
            err(
                f"⚠ turn {summary['unknown'][0]} of this session is unknown (a gateway stopped "
                "while it ran); queued messages wait until it is resolved: /discard"
            )
        if options.get("interactive"):
            if options.get("continue_name") is not None or options.get("resume_ref") is not None:
                show_recap(hermes, sid)
            _repl(conn, hermes, sid, paused=bool(summary.get("unknown")))
            return
        text = options.get("text")
        if text is None:
            err(resume_hint(sid))
            return
        from hermes_es.cli.repl import StreamRenderer

        renderer = StreamRenderer()
        link = _Link(hermes, conn)
        try:
            reply = _one_turn(link, sid, text, renderer)
        finally:
            conn = link.conn
        if renderer.drew_reply:
            renderer.finish_line()  # the reply streamed as it arrived
        else:
            click.echo(reply)
        if not options.get("quiet"):
            err(resume_hint(sid))
    finally:
        conn.close()


def resume_hint(sid: str) -> str:
    """How to come back to a session (as embedded mode says it)."""
    return f"Session: {sid}\nResume with: hermes --resume {sid}"


class _Link:
    """The connection a one-shot uses; replaced by ``relink`` after a drop on a team."""

    def __init__(self, hermes: Hermes, conn: Connection) -> None:
        self.hermes = hermes
        self.conn = conn

    def relink(self, sid: str) -> bool:
        """Re-attach ``sid`` through the team's live owner (waiting for a takeover); False
        when there is no team to turn to or no gateway owns the profile in time."""
        again = _relink(self.hermes, sid)
        if again is None:
            return False
        with contextlib.suppress(Exception):
            self.conn.close()
        self.conn = again
        return True


def _relink(hermes: Hermes, sid: str) -> Connection | None:
    """A connection to the team's live owner, attached to ``sid`` (None: not a team, or no
    gateway owns the profile within the takeover bound)."""
    from hermes_es.cli.team import team_dirs
    from hermes_es.gateway.failover import TAKEOVER_WAIT_S, attach_owner

    team = team_dirs(hermes)
    if not team:
        return None
    err(
        f"(the gateway connection dropped; waiting up to {TAKEOVER_WAIT_S:.0f} s for the"
        " gateway that owns the profile)"
    )
    try:
        handle, conn = attach_owner(team, "cli", timeout=TAKEOVER_WAIT_S)
        conn.call("session.resume", {"ref": sid})
    except GatewayError as exc:
        err(f"({exc.message})")
        return None
    err(
        f"(now on the gateway of {safe(str(handle.paths.root))}, port {handle.endpoint.port},"
        f" epoch {handle.endpoint.epoch})"
    )
    return conn


def _retriable(exc: GatewayError) -> bool:
    """A submission that may be sent again elsewhere: its connection dropped (was it
    admitted? the same submission id answers that), or the gateway no longer owns the
    profile."""
    from hermes_es.gateway.protocol import NOT_OWNER

    return isinstance(exc, GatewayDropped) or exc.code == NOT_OWNER


def _submit(
    conn: Connection,
    params: dict[str, Any],
    relink: Callable[[], Connection | None],
) -> tuple[Connection, dict[str, Any]]:
    """``prompt.submit``, sent again through ``relink``'s connection (the team's live owner)
    when the connection drops or the gateway no longer owns the profile; the same submission
    id makes every resend answer with the one admission. The connection it was admitted on,
    and the admission."""
    return _resend(conn, "prompt.submit", params, relink)


def _resend(
    conn: Connection,
    method: str,
    params: dict[str, Any],
    relink: Callable[[], Connection | None],
) -> tuple[Connection, dict[str, Any]]:
    """An idempotent call (``prompt.submit`` by its submission id, ``session.create`` by its
    create id), sent again through ``relink``'s connection as ``_submit`` says; the
    connection that answered, and the answer."""
    from hermes_es.gateway.failover import TAKEOVER_WAIT_S

    deadline = time.monotonic() + 2 * TAKEOVER_WAIT_S
    while True:
        try:
            answer: dict[str, Any] = conn.call(method, params)
            return conn, answer
        except GatewayError as exc:
            if not _retriable(exc) or time.monotonic() >= deadline:
                raise
            conn.close(wait=2.0)  # its reader (if any) is done before another one starts
            again = relink()
            if again is None:
                raise
            conn = again


def _one_turn(link: _Link, sid: str, text: str, render: StreamRenderer) -> str:
    """Submit one prompt and follow its turn to the end, drawing what it streams (reply
    deltas as they arrive, tool calls and results); the stored reply (errors raise). On a
    team, a drop re-attaches through the live owner and replays what was missed."""
    submission = uuid.uuid4().hex
    replies: list[str] = []
    last = 0

    def collect(params: dict[str, Any]) -> None:
        nonlocal last
        sequence = int(params.get("sequence", 0))
        if sequence and sequence <= last:
            return  # replayed after a re-attach and also pushed live
        last = max(last, sequence)
        replies.extend(t for role, t in _message_texts(params) if role == "assistant")

    def draw(params: dict[str, Any]) -> None:
        event = stream_event(params.get("item"))
        if event is not None and params.get("turn") == turn:
            render(event)

    def relink() -> Connection | None:
        return link.conn if link.relink(sid) else None

    turn = 0
    try:
        link.conn, admitted = _submit(
            link.conn,
            {"session_id": sid, "submission_id": submission, "text": text},
            relink,
        )
    except GatewayDropped as exc:
        raise DroppedMidTurnError(dropped_notice(sid), subject=sid) from exc
    turn = int(admitted["turn"])
    final: dict[str, Any] | None = None
    while final is None:
        try:
            final = link.conn.wait_turn(sid, turn, on_event=collect, on_stream=draw)
        except GatewayDropped as exc:
            render.finish_line()
            if not link.relink(sid):
                raise DroppedMidTurnError(dropped_notice(sid), subject=sid) from exc
            try:
                missed = link.conn.call("events.since", {"session_id": sid, "last_sequence": last})
            except GatewayDropped:
                continue  # that one died too: the loop waits for the next owner
            for event in missed.get("events") or []:
                collect(event)
                body = event.get("event") or {}
                if event.get("type") in ("hermes.turn.finished", "hermes.turn.unknown") and (
                    body.get("turn") == turn
                ):
                    final = event
                    break
    render.finish_line()
    event = final.get("event") or {}
    if final.get("type") == "hermes.turn.unknown":
        raise TurnUnknownError(unknown_notice(sid, turn), subject=sid)
    # A finite run is over either way: ended run_complete (non-destructive), as embedded.
    with contextlib.suppress(GatewayError):
        link.conn.call("session.close", {"session_id": sid, "reason": "run_complete"})
    if event.get("outcome") == "failed":
        err(resume_hint(sid))  # the message is stored: say where and how to come back
        raise ResponderError(
            f"the turn failed: {event.get('error') or 'unknown error'} (your message is stored"
            f" in session {sid})",
            subject=sid,
        )
    return safe(replies[-1]) if replies else ""


def show_recap(hermes: Hermes, sid: str) -> None:
    """Draw the embedded chat's recap of ``sid`` (read side only), honouring
    ``display.resume_display: minimal``."""
    from hermes_es.cli.repl import render_recap
    from hermes_es.queries.recap import session_recap

    recap = session_recap(hermes.reader(), sid)
    render_recap(recap, minimal=hermes.config().config.display.resume_display == "minimal")


def stream_event(item: Any) -> Any:
    """The turn event a ``turn.stream`` item carries (None: not one this client knows)."""
    import msgspec

    from hermes_es.commands.turn_events import TurnEvent

    try:
        return msgspec.convert(item, TurnEvent)
    except msgspec.ValidationError:
        return None


class _Screen:
    """Renders the session's live stream in an interactive chat (any client's turns): the
    streamed deltas, tool calls and results through the embedded renderer, and a stored reply
    only when nothing of it streamed."""

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.done: dict[int, threading.Event] = {}
        self.lock = threading.Lock()
        self.dropped = threading.Event()
        self.mine: set[int] = set()
        self.unknown: set[int] = set()
        """Turns the stream reported unknown (a takeover: their gateway stopped mid-turn)."""
        self.submissions: set[str] = set()
        """Submission ids this terminal sent (its own admissions are not echoed back: the
        admitted event may arrive before the answer that names the turn)."""
        self.renderers: dict[int, StreamRenderer] = {}
        self.echoed: set[int] = set()
        """Turns whose stored reply was shown before any of it streamed (on a standby the
        owner's relayed items may come after the stored reply): their late items are not
        drawn again."""
        self.running = 0
        """The session's running turn (turns of a session run one at a time)."""
        self.last_sequence = 0
        """The newest stored event of the session shown (a reconnect replays after it)."""
        self.at_prompt = threading.Event()
        """Set while the terminal waits at its ``› `` prompt for the user's next line."""
        self.prompt_clean = False
        """Nothing was drawn after the prompt since it was shown."""

    def prompt_shown(self) -> None:
        """The chat shows its prompt and reads a line: what the stream draws meanwhile (a
        turn of another client, a queued turn that runs after ``/discard``) goes below it,
        and the prompt is drawn again once that turn ends."""
        self.prompt_clean = True
        self.at_prompt.set()

    def prompt_left(self) -> None:
        """The user's line was read."""
        self.at_prompt.clear()
        self.prompt_clean = False

    def _below_prompt(self) -> None:
        if self.at_prompt.is_set() and self.prompt_clean:
            sys.stdout.write("\n")
            sys.stdout.flush()
        self.prompt_clean = False

    def _prompt_again(self) -> None:
        if not self.at_prompt.is_set() or self.prompt_clean:
            return
        line = sys.modules.get("readline")
        typed = line.get_line_buffer() if line is not None else ""  # what the user had typed
        sys.stdout.write("› " + typed)
        sys.stdout.flush()
        self.prompt_clean = True

    def is_mine(self, event: dict[str, Any]) -> bool:
        """Whether an admitted event is of a prompt this terminal submitted."""
        with self.lock:
            return event.get("submission_id") in self.submissions or event.get("turn") in self.mine

    def waiter(self, turn: int) -> threading.Event:
        with self.lock:
            return self.done.setdefault(turn, threading.Event())

    def renderer(self, turn: int) -> StreamRenderer:
        from hermes_es.cli.repl import StreamRenderer

        return self.renderers.setdefault(turn, StreamRenderer())

    def switch(self, sid: str) -> None:
        """Follow another session from now on."""
        with self.lock:  # turn numbers are per session: the old session's waiters go
            self.sid = sid
            self.running = 0
            self.last_sequence = 0
            self.renderers.clear()
            self.echoed.clear()
            self.done.clear()
            self.mine.clear()
            self.submissions.clear()

    def __call__(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method == "connection.dropped":
            self.dropped.set()
            for waiter in list(self.done.values()):
                waiter.set()
            return
        if method == "gateway.draining":
            err("(the gateway is shutting down; running turns finish first)")
            return
        params = message.get("params") or {}
        if params.get("session_id") != self.sid:
            return
        if method == "turn.stream":
            event = stream_event(params.get("item"))
            turn = int(params.get("turn", 0))
            if event is not None and turn not in self.echoed:
                self._below_prompt()
                self.renderer(turn)(event)
            return
        if method != "session.event":
            return
        sequence = int(params.get("sequence", 0))
        if sequence and sequence <= self.last_sequence:
            return  # already shown (a replay after a reconnect overlaps the live stream)
        self.last_sequence = max(self.last_sequence, sequence)
        kind = params.get("type")
        event = params.get("event") or {}
        if kind == "hermes.turn.admitted" and not self.is_mine(event):
            self.prompt_clean = False  # (the line below starts with its own newline)
            echo(
                f"\n[{one_line(str(params.get('actor')))} via "
                f"{one_line(str(event.get('client_kind')))}] › {clean(str(event.get('text', '')))}"
            )
        if kind == "hermes.turn.started":
            self.running = int(event.get("turn", 0))
        drawn = self.renderers.get(self.running)
        for role, text in _message_texts(params):
            if role == "assistant" and text.strip() and not (drawn and drawn.drew_reply):
                self._below_prompt()
                echo(text)
                self.echoed.add(self.running)
        if kind in ("hermes.turn.finished", "hermes.turn.unknown"):
            turn = int(event.get("turn", 0))
            finished = self.renderers.pop(turn, None)
            if finished is not None:
                finished.finish_line()
            if kind == "hermes.turn.unknown" or event.get("outcome") == "failed":
                self._below_prompt()
            if kind == "hermes.turn.finished" and event.get("outcome") == "failed":
                err(f"turn {turn} failed: {one_line(str(event.get('error', '')))}")
            if kind == "hermes.turn.unknown":
                with self.lock:
                    self.unknown.add(turn)
                err(
                    f"⚠ turn {turn} is unknown: the gateway running it stopped before it"
                    " finished (its model call or tools may have run; no answer was stored)."
                    " Your message is kept and is not sent again. /discard resolves it (or:"
                    f" hermes sessions resolve {self.sid} --discard) and messages queued behind"
                    f" it run then; the session stays resumable: hermes --resume {self.sid}"
                )
            self.waiter(turn).set()
            self._prompt_again()


def _sessions(conn: Connection, sid: str) -> None:
    """``/sessions``: the recent sessions, as the gateway lists them."""
    rows = conn.call("session.list", {"limit": 20}).get("sessions") or []
    if not rows:
        click.echo("(no sessions)")
    for row in rows:
        marker = "*" if row.get("id") == sid else " "
        title = pad(fit(one_line(str(row.get("title") or "-")), 24), 24)
        preview = fit(one_line(str(row.get("preview") or "")), 50)
        echo(f"{marker} {one_line(str(row.get('id')))}  {title}  {preview}")


def _not_here(name: str) -> None:
    """Say that an embedded slash command has no gateway counterpart (nothing happened)."""
    err(
        f"{name} is not available through the gateway (nothing was done); /help lists the "
        "commands that are"
    )


def _reconnect(hermes: Hermes, screen: _Screen, sid: str) -> tuple[Connection, bool] | None:
    """After a drop on a team: the live owner's connection, re-attached to ``sid`` with the
    missed events replayed (``events.since``), and whether a turn is unknown; None: no team."""
    from hermes_es.cli.team import team_dirs
    from hermes_es.gateway.failover import TAKEOVER_WAIT_S, attach_owner

    team = team_dirs(hermes)
    if not team:
        return None
    err("(the gateway connection dropped; finding the gateway that owns the profile now)")
    handle, conn = attach_owner(team, "cli", timeout=TAKEOVER_WAIT_S)
    summary = conn.call("session.resume", {"ref": sid})
    missed = conn.call("events.since", {"session_id": sid, "last_sequence": screen.last_sequence})
    err(
        f"(now on the gateway of {safe(str(handle.paths.root))}, port {handle.endpoint.port},"
        f" epoch {handle.endpoint.epoch}; what happened meanwhile follows)"
    )
    screen.dropped.clear()
    for event in missed.get("events") or []:
        screen({"method": "session.event", "params": {**event, "session_id": sid}})
    conn.start_reader(screen)
    unknown = list(summary.get("unknown") or [])
    if unknown and not set(unknown) & screen.unknown:  # (the replay has not said it)
        err(
            f"⚠ turn {unknown[0]} is unknown (its gateway stopped while it ran): your message is"
            " kept and is not sent again. /discard resolves it (or: hermes sessions resolve"
            f" {sid} --discard) and queued messages run then"
        )
    return conn, bool(unknown)


def _relink_screen(
    hermes: Hermes, screen: _Screen, sid: str, paused: list[bool]
) -> Connection | None:
    """``_reconnect`` for ``_submit`` in the interactive chat (``paused`` hears whether a
    turn is unknown there)."""
    again = _reconnect(hermes, screen, sid)
    if again is None:
        return None
    paused.append(again[1])
    return again[0]


def _repl(conn: Connection, hermes: Hermes, sid: str, *, paused: bool = False) -> None:
    """The interactive loop: read a line, submit it, show the stream; slash commands."""
    from hermes_es.cli.repl import COMMANDS

    screen = _Screen(sid)
    conn.start_reader(screen)
    click.echo(
        f"Session {sid} (through the gateway). /help for commands, /exit to leave, /discard to"
        " resolve an unknown turn."
    )
    while True:
        screen.prompt_shown()
        try:
            line = input("› ")
        except (EOFError, KeyboardInterrupt):
            line = "/exit"
        finally:
            screen.prompt_left()
        text = line.strip()
        if not text:
            continue
        if screen.dropped.is_set():
            again = _reconnect(hermes, screen, sid)
            if again is None:
                raise DroppedMidTurnError(dropped_notice(sid), subject=sid)
            conn, paused = again
        name, _, arg = text.partition(" ")
        arg = arg.strip()
        try:
            if text in ("/exit", "/quit"):
                closed = conn.call("session.close", {"session_id": sid})
                if closed.get("removed"):
                    click.echo("Nothing was said, so no session was kept.")
                else:
                    err(f"Session: {sid}\nResume with: hermes --resume {sid}")
                return
            if name in ("/new", "/reset"):
                before = sid
                relinked: list[bool] = []
                conn, created = _resend(
                    conn,
                    "session.create",
                    {
                        "title": arg,
                        "workspace": os.getcwd(),
                        "leave": sid,
                        "parent_kind": "reset" if name == "/reset" else "",
                        "create_id": uuid.uuid4().hex,
                    },
                    functools.partial(_relink_screen, hermes, screen, sid, relinked),
                )
                sid = created["session_id"]
                screen.switch(sid)
                _crumb(hermes, sid)
                paused = False
                if name == "/reset":
                    echo(f"Reset: new conversation {sid} (continues from {before})")
                else:
                    echo(f"New session {sid}" + (f' "{one_line(arg)}"' if arg else ""))
                continue
            if name == "/discard":
                resolved = conn.call("turn.resolve", {"session_id": sid})
                click.echo(f"turn {resolved['turn']} discarded; queued messages run now")
                paused = False
                continue
            if name == "/title":
                if not arg:
                    err("usage: /title NAME")
                    continue
                renamed = conn.call("session.rename", {"session_id": sid, "title": arg})
                echo(f'Title set: "{one_line(str(renamed.get("title", arg)))}"')
                continue
            if name == "/sessions":
                _sessions(conn, sid)
                continue
            if name == "/resume":
                if not arg:
                    err("usage: /resume NAME")
                    continue
                summary = conn.call("session.resume", {"ref": arg})
                if summary["session_id"] != sid:
                    conn.call("session.close", {"session_id": sid, "reason": "switched"})
                    sid = summary["session_id"]
                    screen.switch(sid)
                    _crumb(hermes, sid)
                paused = bool(summary.get("unknown"))
                show_recap(hermes, sid)
                continue
            if name == "/recap":
                show_recap(hermes, sid)
                continue
            if name == "/help":
                click.echo(GATEWAY_HELP)
                continue
            if text.startswith("/") and text[1:2].isalpha():
                if name in COMMANDS:
                    _not_here(name)
                else:
                    err(f"Unknown command {one_line(name)}; /help lists commands")
                continue
            submission = uuid.uuid4().hex
            with screen.lock:
                screen.submissions.add(submission)
            reattached: list[bool] = []
            conn, admitted = _submit(
                conn,
                {"session_id": sid, "submission_id": submission, "text": line},
                functools.partial(_relink_screen, hermes, screen, sid, reattached),
            )
            if reattached:
                paused = reattached[-1]
        except GatewayDropped as exc:
            raise DroppedMidTurnError(dropped_notice(sid), subject=sid) from exc
        except HermesError as exc:
            echo(f"Error: {exc.message}", err=True)
            continue
        turn = int(admitted["turn"])
        with screen.lock:
            screen.mine.add(turn)
        if paused:
            click.echo("(queued: it runs once the unknown turn is resolved with /discard)")
            continue
        if admitted.get("queued") and admitted["queued"][0] != turn:
            click.echo(f"(queued behind turn {admitted['queued'][0]})")
        screen.waiter(turn).wait()
        if turn in screen.unknown:
            paused = True  # a takeover recorded it unknown: what follows waits for /discard
        if screen.dropped.is_set():
            again = _reconnect(hermes, screen, sid)
            if again is None:
                raise DroppedMidTurnError(dropped_notice(sid), subject=sid)
            conn, paused = again
        sys.stdout.flush()
