"""The chat through a running gateway: ``hermes``, ``-c``, ``-r``, ``chat -q`` and ``/new``.

The CLI only reads input and renders the session's event stream; the gateway admits, queues
and runs every turn. The session is picked from the read side (like embedded mode), then
attached with a ticket from the control socket; nothing here opens state.db for writing. Two
terminals on one session both stay attached and see each other's turns. A connection that
drops mid-turn loses nothing: the gateway stores the outcome, and the CLI says how to resume.
"""

from __future__ import annotations

import os
import sys
import threading
import uuid
from typing import TYPE_CHECKING, Any

import click

from hermes_es.errors import HermesError, ResponderError
from hermes_es.gateway.client import Connection, GatewayDropped, GatewayHandle

if TYPE_CHECKING:
    from hermes_es.cli.base import Hermes

_CONTROL = {i for i in range(32) if i not in (9, 10)} | {127}
_TABLE = {i: f"\\x{i:02x}" for i in _CONTROL}


def safe(text: str) -> str:
    """Text from models, tools and other users with terminal control characters made visible."""
    return text.translate(_TABLE)


def err(message: str) -> None:
    """A status line on stderr."""
    click.echo(message, err=True)


class DroppedMidTurnError(HermesError):
    """The gateway connection dropped while a turn was pending (its outcome will be stored)."""


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


def _attach(conn: Connection, hermes: Hermes, options: dict[str, Any]) -> dict[str, Any]:
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
            },
        )
    _crumb(hermes, summary["session_id"])
    return summary


def run_via_gateway(hermes: Hermes, handle: GatewayHandle, **options: Any) -> None:
    """Run the chat the options ask for through the gateway."""
    conn = handle.connect("cli")
    try:
        summary = _attach(conn, hermes, options)
        sid = summary["session_id"]
        if summary.get("unknown"):
            err(
                f"⚠ turn {summary['unknown'][0]} of this session is unknown (a gateway stopped "
                "while it ran); queued messages wait until it is resolved: /discard"
            )
        if options.get("interactive"):
            _repl(conn, sid, paused=bool(summary.get("unknown")))
            return
        text = options.get("text")
        if text is None:
            err(f"Session: {sid}\nResume with: hermes --resume {sid}")
            return
        reply = _one_turn(conn, sid, text)
        click.echo(reply)
        if not options.get("quiet"):
            err(f"Session: {sid}\nResume with: hermes --resume {sid}")
    finally:
        conn.close()


def _one_turn(conn: Connection, sid: str, text: str) -> str:
    """Submit one prompt, wait for its turn to finish; the reply (errors raise)."""
    submission = uuid.uuid4().hex
    replies: list[str] = []
    try:
        admitted = conn.call(
            "prompt.submit", {"session_id": sid, "submission_id": submission, "text": text}
        )

        def collect(params: dict[str, Any]) -> None:
            replies.extend(t for role, t in _message_texts(params) if role == "assistant")

        final = conn.wait_turn(sid, admitted["turn"], on_event=collect)
    except GatewayDropped as exc:
        raise DroppedMidTurnError(dropped_notice(sid), subject=sid) from exc
    event = final.get("event") or {}
    if final.get("type") == "hermes.turn.unknown":
        raise DroppedMidTurnError(dropped_notice(sid), subject=sid)
    if event.get("outcome") == "failed":
        raise ResponderError(
            f"the turn failed: {event.get('error') or 'unknown error'} (your message is stored"
            f" in session {sid})",
            subject=sid,
        )
    conn.call("session.close", {"session_id": sid, "reason": "run_complete"})
    return safe(replies[-1]) if replies else ""


class _Screen:
    """Renders the session's live stream in an interactive chat (any client's turns)."""

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.done: dict[int, threading.Event] = {}
        self.lock = threading.Lock()
        self.dropped = threading.Event()
        self.mine: set[int] = set()

    def waiter(self, turn: int) -> threading.Event:
        with self.lock:
            return self.done.setdefault(turn, threading.Event())

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
        if method != "session.event" or params.get("session_id") != self.sid:
            return
        kind = params.get("type")
        event = params.get("event") or {}
        if kind == "hermes.turn.admitted" and event.get("turn") not in self.mine:
            click.echo(
                f"\n[{safe(str(params.get('actor')))} via {event.get('client_kind')}] "
                f"› {safe(str(event.get('text', '')))}"
            )
        for role, text in _message_texts(params):
            if role == "assistant" and text.strip():
                click.echo(safe(text))
        if kind == "hermes.turn.finished" and event.get("outcome") == "failed":
            err(f"turn {event.get('turn')} failed: {safe(str(event.get('error', '')))}")
        if kind in ("hermes.turn.finished", "hermes.turn.unknown"):
            self.waiter(int(event.get("turn", 0))).set()


def _repl(conn: Connection, sid: str, *, paused: bool = False) -> None:
    """The interactive loop: read a line, submit it, show the stream; /discard, /exit."""
    screen = _Screen(sid)
    conn.start_reader(screen)
    click.echo(
        f"Session {sid} (through the gateway). /exit to leave, /discard to resolve an unknown turn."
    )
    while True:
        try:
            line = input("› ")
        except (EOFError, KeyboardInterrupt):
            line = "/exit"
        text = line.strip()
        if not text:
            continue
        if screen.dropped.is_set():
            raise DroppedMidTurnError(dropped_notice(sid), subject=sid)
        try:
            if text in ("/exit", "/quit"):
                conn.call("session.close", {"session_id": sid})
                err(f"Session: {sid}\nResume with: hermes --resume {sid}")
                return
            if text == "/new" or text.startswith("/new "):
                conn.call("session.close", {"session_id": sid})
                created = conn.call(
                    "session.create", {"title": text[4:].strip(), "workspace": os.getcwd()}
                )
                sid = screen.sid = created["session_id"]
                paused = False
                click.echo(f"New session {sid}")
                continue
            if text == "/discard":
                resolved = conn.call("turn.resolve", {"session_id": sid})
                click.echo(f"turn {resolved['turn']} discarded; queued messages run now")
                paused = False
                continue
            admitted = conn.call(
                "prompt.submit",
                {"session_id": sid, "submission_id": uuid.uuid4().hex, "text": line},
            )
        except GatewayDropped as exc:
            raise DroppedMidTurnError(dropped_notice(sid), subject=sid) from exc
        except HermesError as exc:
            err(f"Error: {exc.message}")
            continue
        turn = int(admitted["turn"])
        screen.mine.add(turn)
        if paused:
            click.echo("(queued: it runs once the unknown turn is resolved with /discard)")
            continue
        if admitted.get("queued") and admitted["queued"][0] != turn:
            click.echo(f"(queued behind turn {admitted['queued'][0]})")
        screen.waiter(turn).wait()
        if screen.dropped.is_set():
            raise DroppedMidTurnError(dropped_notice(sid), subject=sid)
        sys.stdout.flush()
