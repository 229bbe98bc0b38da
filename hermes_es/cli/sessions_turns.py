"""``hermes sessions resolve ID --discard``: resolve a turn a gateway crash left unknown.

With a gateway running the request goes to it (it owns the session's queue); without one the
resolution is recorded directly. Followers queued behind the unknown turn run once a gateway
runs again.
"""

from __future__ import annotations

import click

from hermes_es.cli.base import get_hermes
from hermes_es.errors import UsageError


@click.command("resolve")
@click.argument("session")
@click.option("--discard", is_flag=True, help="Give the unknown turn up (nothing is replayed).")
@click.option("--turn", type=int, default=0, help="The unknown turn (default: the oldest).")
@click.pass_context
def resolve_cmd(ctx: click.Context, session: str, discard: bool, turn: int) -> None:
    """Resolve the unknown turn of SESSION so that its queued followers may run.

    Example: hermes sessions resolve 20250305_091523_a1b2c3 --discard
    """
    if not discard:
        raise UsageError("say how to resolve it: --discard")
    hermes = get_hermes(ctx)
    from hermes_es.gateway.client import STARTING_WAIT_S, running_gateway

    gateway = running_gateway(hermes.dir, starting_wait=STARTING_WAIT_S)
    if gateway is not None:
        resolved = gateway.http_call(
            "turn.resolve", {"session": session, "turn": turn, "resolution": "discard"}
        )
        click.echo(f"{resolved['session_id']}: turn {resolved['turn']} discarded (via the gateway)")
        return
    hermes.backend.require()  # the profile's store: state.db or a server database
    from hermes_es.commands import turns

    engine = hermes.engine()
    sid = engine.resolve(session)
    resolved_turn = turns.resolve(engine, sid, turn, resolution="discard")
    click.echo(f"{sid}: turn {resolved_turn} discarded")
