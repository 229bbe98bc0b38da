"""``hermes sessions rename|pin|unpin|archive|unarchive|delete``: curation commands.

Each one is a domain command on the engine that appends events (delete physically removes a
session and leaves a receipt). Conversations split by compression are pinned and archived
through their live tip; unpin and unarchive clear every segment.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from hermes_es.cli.base import echo_json, get_hermes, warn_unscrubbed, when
from hermes_es.errors import ValidationError
from hermes_es.terminal_text import clean, echo

if TYPE_CHECKING:
    from hermes_es.commands.engine import SessionEngine
    from hermes_es.gateway.client import GatewayHandle


def _gateway(ctx: click.Context) -> GatewayHandle | None:
    """The profile's running gateway: it owns state.db, so curation goes through it."""
    from hermes_es.gateway.client import STARTING_WAIT_S, running_gateway

    return running_gateway(get_hermes(ctx).dir, starting_wait=STARTING_WAIT_S)


def _engine(ctx: click.Context) -> SessionEngine:
    hermes = get_hermes(ctx)
    hermes.backend.require()
    return hermes.engine()


@click.command("rename")
@click.argument("session")
@click.argument("title")
@click.pass_context
def rename_cmd(ctx: click.Context, session: str, title: str) -> None:
    """Set the title of SESSION (id, unique prefix or current title). Titles are unique;
    an empty TITLE clears it.

    Example: hermes sessions rename 20250305_091523_a1b2c3 "payments refactor"
    """
    gateway = _gateway(ctx)
    if gateway is not None:
        done = gateway.http_call("session.rename", {"session": session, "title": title})
        sid, new_title = done["session_id"], done["title"]
    else:
        engine = _engine(ctx)
        sid = engine.resolve(session)
        new_title = engine.set_title(sid, title).title
    echo(f"{sid}: title {new_title!r}" if new_title else f"{sid}: title cleared")


def _pin(ctx: click.Context, sessions: tuple[str, ...], pinned: bool) -> None:
    from hermes_es.commands.archive import pin_sessions

    gateway = _gateway(ctx)
    if gateway is not None:
        changed = []
        for ref in sessions:
            done = gateway.http_call("session.pin", {"session": ref, "pinned": pinned})
            changed += [s for s in done["changed"] if s not in changed]
    else:
        changed = pin_sessions(_engine(ctx), sessions, pinned)
    verb = "pinned" if pinned else "unpinned"
    for sid in changed:
        echo(f"{verb} {sid}")
    if not changed:
        echo(f"already {verb}")


@click.command("pin")
@click.argument("sessions", nargs=-1, required=True)
@click.pass_context
def pin_cmd(ctx: click.Context, sessions: tuple[str, ...]) -> None:
    """Pin conversations (through their live tip) so prune and the idle sweep leave them alone.

    Example: hermes sessions pin "payments refactor" 20250305_091523_a1b2c3
    """
    _pin(ctx, sessions, True)


@click.command("unpin")
@click.argument("sessions", nargs=-1, required=True)
@click.pass_context
def unpin_cmd(ctx: click.Context, sessions: tuple[str, ...]) -> None:
    """Unpin conversations (every segment of each).

    Example: hermes sessions unpin "payments refactor"
    """
    _pin(ctx, sessions, False)


@click.command("archive")
@click.argument("sessions", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Archive every conversation not in use.")
@click.option("--older-than", metavar="AGE", help="Only conversations idle this long (30d, 2w).")
@click.option("--source", "sources", multiple=True, metavar="TAG", help="Only this source.")
@click.option("--cwd", metavar="NEEDLE", help="Only conversations whose workspace contains it.")
@click.option(
    "--sweep",
    is_flag=True,
    help="Run the idle sweep: archive (reason sweep) what sessions.auto_archive days left idle.",
)
@click.option(
    "--idle-days", type=click.FloatRange(min=0, max=36500), help="Override sessions.auto_archive."
)
@click.option("--dry-run", is_flag=True, help="Show what would be archived.")
@click.option("--json", "as_json", is_flag=True, help="Print the archived tip ids as JSON.")
@click.pass_context
def archive_cmd(
    ctx: click.Context,
    sessions: tuple[str, ...],
    all_: bool,
    older_than: str | None,
    sources: tuple[str, ...],
    cwd: str | None,
    sweep: bool,
    idle_days: float | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Archive conversations: the ones named, or with --all / filters every matching one.
    A compressed conversation is archived as a unit through its live tip, and a chat still in
    use (not ended and active in the last day, or open in a running hermes) is never archived
    in bulk. You archived it, so it stays archived until 'hermes sessions unarchive'.

    --sweep runs the sessions.auto_archive idle sweep (run it from cron, or let the chat and
    gateway run it); a swept chat comes back by itself when resumed or compressed.

    Example: hermes sessions archive --all --older-than 30d --source cli
    """
    from hermes_es.commands import archive as arch
    from hermes_es.commands.holders import held_sessions
    from hermes_es.commands.prune import UnitFilter, parse_age
    from hermes_es.queries.units import load_units

    filtering = bool(all_ or older_than or sources or cwd)
    if sessions and (filtering or sweep):
        raise click.UsageError("give session ids, or --all / filters / --sweep, not both")
    if not sessions and not filtering and not sweep:
        raise click.UsageError("name sessions to archive, or use --all, a filter, or --sweep")
    if sweep and filtering:
        raise click.UsageError("--sweep takes no filters (it uses sessions.auto_archive)")
    try:
        age = parse_age(older_than) if older_than else None
    except ValidationError as exc:
        raise click.BadParameter(exc.message, param_hint="--older-than") from exc
    hermes = get_hermes(ctx)
    gateway = _gateway(ctx)
    now = time.time()
    if gateway is not None:
        if sessions:
            _report(_archive_via(gateway, list(sessions), "user"), "archived", as_json)
            return
        units = load_units(hermes.reader())
    else:
        engine = _engine(ctx)
        if sessions:
            done = arch.archive_sessions(engine, sessions)
            _report(done, "archived", as_json)
            return
        units = load_units(engine.store.connection())
    held = held_sessions(hermes.db_path)
    if sweep:
        days = idle_days if idle_days is not None else hermes.config().config.sessions.auto_archive
        if days <= 0:
            echo("idle sweep is off (sessions.auto_archive is 0); nothing archived")
            return
        planned = arch.plan_sweep(units, days, now, held)
        reason = "sweep"
    else:
        f = UnitFilter(older_than=age, sources=sources, cwd=cwd)
        planned = arch.plan_archive(units, f, now, held)
        reason = "user"
    if dry_run:
        _report([u.tip.id for u in planned], "would archive", as_json)
        return
    if gateway is not None:
        _report(_archive_via(gateway, [u.tip.id for u in planned], reason), "archived", as_json)
        return
    _report(arch.archive_units(engine, planned, reason), "archived", as_json)


def _archive_via(gateway: GatewayHandle, refs: list[str], reason: str) -> list[str]:
    """Archive through the gateway; the tips it archived."""
    done: list[str] = []
    for ref in refs:
        result = gateway.http_call("session.archive", {"session": ref, "reason": reason})
        done += [s for s in result["changed"] if s not in done]
    return done


def _report(ids: list[str], verb: str, as_json: bool) -> None:
    if as_json:
        echo_json(ids)
        return
    for sid in ids:
        echo(f"{verb} {sid}")
    echo(f"{verb} {len(ids)} conversation{'s' if len(ids) != 1 else ''}")


@click.command("unarchive")
@click.argument("sessions", nargs=-1, required=True)
@click.pass_context
def unarchive_cmd(ctx: click.Context, sessions: tuple[str, ...]) -> None:
    """Bring archived conversations back (every segment of each).

    Example: hermes sessions unarchive 20250305_091523_a1b2c3
    """
    from hermes_es.commands.archive import unarchive_sessions

    gateway = _gateway(ctx)
    if gateway is not None:
        done = []
        for ref in sessions:
            result = gateway.http_call("session.archive", {"session": ref, "archived": False})
            done += [s for s in result["changed"] if s not in done]
    else:
        done = unarchive_sessions(_engine(ctx), sessions)
    for sid in done:
        echo(f"unarchived {sid}")
    if not done:
        echo("not archived")


@click.command("delete")
@click.argument("session")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--chain", is_flag=True, help="Delete every compression segment of it too.")
@click.pass_context
def delete_cmd(ctx: click.Context, session: str, yes: bool, chain: bool) -> None:
    """Delete SESSION for good (with its delegate sessions): its events, messages and index
    entries go, a content-free receipt stays. Asks first unless --yes; without a terminal,
    --yes is required. A chat that still has the session open recreates it on its next save.

    Example: hermes sessions delete 20250305_091523_a1b2c3 --yes
    """
    from hermes_es.commands.delete import delete_many, delete_session
    from hermes_es.commands.holders import describe, live_holders
    from hermes_es.queries.units import chain_segments

    hermes = get_hermes(ctx)
    gateway = _gateway(ctx)
    if gateway is not None:
        from hermes_es.queries.resolve import resolve_session

        sid = resolve_session(hermes.reader(), session)
        segments = chain_segments(hermes.reader(), sid)
    else:
        engine = _engine(ctx)
        sid = engine.resolve(session)
        segments = chain_segments(engine.store.connection(), sid)
    targets = [s.id for s in reversed(segments)] if chain else [sid]
    this = next((s for s in segments if s.id == sid), None)
    label = f"{sid}" + (f" {this.title!r}" if this and this.title else "")
    if this is not None:
        label += f" ({this.messages} messages, last active {when(this.last_active)})"
    if chain and len(segments) > 1:
        label += f" and {len(segments) - 1} other segment(s) of the conversation"
    elif len(segments) > 1:
        label += f" — segment of a {len(segments)}-segment conversation (--chain deletes all)"
    for holder in live_holders(hermes.db_path, exclude_self=True):
        if holder.session_id in targets:
            echo(f"warning: {describe(holder)} has it open; its next save recreates it", err=True)
    if not yes:
        if not sys.stdin.isatty():
            raise ValidationError(
                f"refusing to delete {sid} without --yes (no terminal to confirm on)", subject=sid
            )
        if not click.confirm(clean(f"Delete {label}?"), default=False):
            echo("nothing deleted")
            return
    if gateway is not None:
        result = gateway.http_call("sessions.delete", {"session_ids": targets, "reason": "delete"})
        for deleted in result["deleted"]:
            echo(f"deleted {deleted} (through the gateway)")
        warn_unscrubbed(bool(result["scrubbed"]), hermes)
        return
    if chain:
        done = delete_many(engine.store, targets, reason="delete", actor=engine.actor)
    else:
        done = delete_session(engine.store, sid, reason="delete", actor=engine.actor)
    for d in done:
        echo(f"deleted {d.session_id} ({d.messages} messages)")
    warn_unscrubbed(all(d.scrubbed for d in done), hermes)
