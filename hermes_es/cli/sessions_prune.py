"""``hermes sessions prune`` and ``hermes sessions optimize``: store housekeeping.

Both need state.db to themselves: while another hermes process holds it (a chat, a dashboard,
a scheduled job; see commands/holders) they refuse, naming the holder, unless ``--force``.
With a gateway running, prune belongs to the gateway: prune selects on the read side and the
gateway deletes what it selected (HTTP, a native-http ticket), re-checking each session.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import TYPE_CHECKING

import click

from hermes_es.cli.base import Count, echo_json, get_hermes, warn_unscrubbed, when
from hermes_es.errors import HolderError, SessionNotFoundError, ValidationError
from hermes_es.terminal_text import echo

if TYPE_CHECKING:
    from hermes_es.commands.prune import PrunePlan
    from hermes_es.store.backend import StoreBackend

SHOW_ROWS = 20
PROGRESS_FROM = 200
"""Draw a progress bar when a prune deletes at least this many sessions (on a terminal)."""


def _check_holders(db_path: object, action: str, *, gateway_matters: bool) -> None:
    from hermes_es.commands.holders import describe, live_holders, require_no_holders

    if gateway_matters:
        gateways = [h for h in live_holders(str(db_path), exclude_self=True) if h.kind == "gateway"]
        if gateways:
            raise HolderError(
                f"{action} refused: the gateway ({describe(gateways[0])}) holds state.db but"
                " has published no endpoint (gateway.json) to send the prune to. Stop it first,"
                " or pass --force",
                subject=str(db_path),
            )
    require_no_holders(str(db_path), action)


def _parse(value: str | None, param: str, parse: object) -> float | None:
    if value is None:
        return None
    try:
        return float(parse(value))  # type: ignore[operator]
    except ValidationError as exc:
        raise click.BadParameter(exc.message, param_hint=param) from exc


def _show_plan(plan: PrunePlan, as_json: bool) -> None:
    if as_json:
        echo_json(
            {
                "conversations": [
                    {
                        "tip_id": u.tip.id,
                        "root_id": u.root_id,
                        "title": u.tip.title,
                        "source": u.tip.source,
                        "last_active": u.last_active,
                        "segments": u.ids,
                        "delegates": [d.id for d in u.delegates],
                        "messages": u.messages,
                    }
                    for u in plan.selected
                ],
                "sessions": plan.sessions,
                "messages": plan.messages,
                "kept": plan.kept,
            }
        )
        return
    for u in plan.selected[:SHOW_ROWS]:
        extra = f" +{len(u.members) - 1} segment(s)" if len(u.members) > 1 else ""
        extra += f" +{len(u.delegates)} delegate(s)" if u.delegates else ""
        title = f" {u.tip.title!r}" if u.tip.title else ""
        echo(
            f"  {u.tip.id}{title}  [{u.tip.source}]  last active {when(u.last_active)}"
            f"  {u.messages} msgs{extra}"
        )
    if len(plan.selected) > SHOW_ROWS:
        echo(f"  … and {len(plan.selected) - SHOW_ROWS} more")
    kept = Counter(k.reason for k in plan.kept)
    if kept:
        echo("kept: " + ", ".join(f"{n} {reason}" for reason, n in sorted(kept.items())))
    echo(
        f"{len(plan.selected)} conversation(s): {plan.sessions} session(s), "
        f"{plan.messages} message(s)"
    )


@click.command("prune")
@click.option(
    "--older-than",
    metavar="AGE",
    help="Last active longer ago than AGE (30d, 12h, 2w, 1y). Default 90d when no time is given.",
)
@click.option("--source", "sources", multiple=True, metavar="TAG", help="Only this source.")
@click.option("--title", metavar="TEXT", help="Only conversations whose title contains TEXT.")
@click.option("--cwd", metavar="NEEDLE", help="Only conversations whose workspace contains it.")
@click.option("--min-messages", type=Count(0), help="At least this many messages.")
@click.option("--max-messages", type=Count(0), help="At most this many messages.")
@click.option("--before", metavar="TIME", help="Last active before TIME (2025-01-31 or 30d).")
@click.option("--after", metavar="TIME", help="Last active at or after TIME.")
@click.option("--dry-run", is_flag=True, help="Only show what would be deleted.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--force", is_flag=True, help="Run even while another hermes process holds state.db.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan (and result) as JSON.")
@click.pass_context
def prune_cmd(
    ctx: click.Context,
    older_than: str | None,
    sources: tuple[str, ...],
    title: str | None,
    cwd: str | None,
    min_messages: int | None,
    max_messages: int | None,
    before: str | None,
    after: str | None,
    dry_run: bool,
    yes: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Delete old ended conversations for good. Pinned ones are never pruned, nor anything
    still open. A conversation split by compression goes as a unit, judged by its newest
    segment, so older segments stay while a later one does. Shows the list and asks first
    unless --yes (required without a terminal).

    Example: hermes sessions prune --older-than 60d --source cli --dry-run
    """
    from hermes_es.commands.holders import held_sessions
    from hermes_es.commands.prune import (
        DEFAULT_AGE,
        UnitFilter,
        execute_prune,
        parse_age,
        parse_time,
        plan_prune,
    )
    from hermes_es.queries.units import load_units

    now = time.time()
    f = UnitFilter(
        older_than=_parse(older_than, "--older-than", parse_age),
        sources=sources,
        title=title,
        cwd=cwd,
        min_messages=min_messages,
        max_messages=max_messages,
        before=_parse(before, "--before", lambda v: parse_time(v, now)),
        after=_parse(after, "--after", lambda v: parse_time(v, now)),
    )
    if not f.has_time():
        f = UnitFilter(**{**f.__dict__, "older_than": DEFAULT_AGE})
    hermes = get_hermes(ctx)
    if not hermes.backend.exists():
        where = hermes.backend.location
        raise SessionNotFoundError(f"no store at {where}", subject=where)
    from hermes_es.gateway.client import STARTING_WAIT_S, running_gateway

    gateway = running_gateway(hermes.dir, starting_wait=STARTING_WAIT_S)
    if gateway is None and not dry_run and not force:
        _check_holders(hermes.db_path, "prune", gateway_matters=True)
    conn = hermes.reader() if gateway is not None else hermes.engine().store.connection()
    plan = plan_prune(load_units(conn), f, now, held_sessions(hermes.db_path))
    if not plan.selected:
        if as_json:
            _show_plan(plan, True)
        else:
            _show_plan(plan, False)
            echo("nothing to prune")
        return
    if not as_json or dry_run:
        _show_plan(plan, as_json)
    if dry_run:
        if not as_json:
            echo("dry run: nothing deleted")
        return
    if not yes:
        if not sys.stdin.isatty():
            raise ValidationError("refusing to prune without --yes (no terminal to confirm on)")
        if not click.confirm("Delete these for good?", default=False):
            echo("nothing deleted")
            return
    from hermes_es.cli.progress import progress_bar

    show = plan.sessions >= PROGRESS_FROM and sys.stderr.isatty() and not as_json
    if gateway is not None:
        # The gateway owns state.db: it deletes what this prune selected (re-checking each).
        ids = [sid for unit in plan.selected for sid in unit.ids]
        result = gateway.http_call("sessions.delete", {"session_ids": ids, "reason": "prune"})
        if as_json:
            echo_json({"deleted": result["deleted"], "kept": plan.kept, "via": "gateway"})
            return
        click.echo(
            f"deleted {len(result['deleted'])} session(s), {result['messages']} message(s)"
            " (through the gateway)"
        )
        for sid in result.get("kept", []):
            click.echo(f"kept {sid}: changed during prune")
        warn_unscrubbed(bool(result["scrubbed"]), hermes)
        return
    engine = hermes.engine()
    with progress_bar("pruning", enabled=show) as update:
        done = execute_prune(engine.store, plan, actor=engine.actor, progress=update)
    if as_json:
        echo_json({"deleted": [d.session_id for d in done], "kept": plan.kept})
        return
    echo(f"deleted {len(done)} session(s), {sum(d.messages for d in done)} message(s)")
    warn_unscrubbed(all(d.scrubbed for d in done), hermes)


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"


@click.command("optimize")
@click.option("--force", is_flag=True, help="Run even while another hermes process holds state.db.")
@click.option("--json", "as_json", is_flag=True, help="Print sizes and timings as JSON.")
@click.pass_context
def optimize_cmd(ctx: click.Context, force: bool, as_json: bool) -> None:
    """Merge the full-text index segments and VACUUM state.db, without touching any session
    data; prints the size before and after. Refuses while another hermes process holds
    state.db unless --force.

    Example: hermes sessions optimize
    """
    from hermes_es.commands.optimize import optimize_store

    hermes = get_hermes(ctx)
    if hermes.backend.kind != "sqlite":
        _optimize_server(hermes.backend, as_json)
        return
    if not hermes.backend.exists():
        where = hermes.backend.location
        raise SessionNotFoundError(f"no store at {where}", subject=where)
    if not force:
        _check_holders(hermes.db_path, "optimize", gateway_matters=False)
    result = optimize_store(hermes.db_path)
    if as_json:
        echo_json(result)
        return
    before = result.db_before + result.wal_before
    after = result.db_after + result.wal_after
    echo(
        f"state.db {_size(result.db_before)} (+ WAL {_size(result.wal_before)}) → "
        f"{_size(result.db_after)} (+ WAL {_size(result.wal_after)}); "
        f"{_size(max(before - after, 0))} reclaimed "
        f"(index merge {result.merge_seconds:.1f}s, vacuum {result.vacuum_seconds:.1f}s)"
    )


def _optimize_server(backend: StoreBackend, as_json: bool) -> None:
    """A server store: rewrite the tables deletes touch (what finishes a blocked scrub);
    the rest is the server's autovacuum's."""
    from hermes_es.errors import StoreBusyError

    where = backend.location
    if not backend.exists():
        raise SessionNotFoundError(f"no store at {where}", subject=where)
    before = backend.store_bytes()[0]
    started = time.perf_counter()
    done = backend.scrub()
    seconds = time.perf_counter() - started
    if not done:
        raise StoreBusyError(
            f"another connection to {where} held a lock on the tables optimize rewrites"
            " (VACUUM (FULL)) for longer than 2 s; nothing was rewritten, and a scrub a delete"
            " left pending stays pending; try again when that connection is idle",
            subject=where,
        )
    after = backend.store_bytes()[0]
    if as_json:
        echo_json({"store": where, "bytes_before": before, "bytes_after": after,
                   "vacuum_seconds": round(seconds, 3)})  # fmt: skip
        return
    echo(
        f"{where}: {_size(before)} → {_size(after)}; {_size(max(before - after, 0))} reclaimed"
        f" (VACUUM (FULL) of the tables deletes touch, {seconds:.1f}s; the rest is autovacuum's)"
    )
