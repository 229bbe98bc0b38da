"""The CLI on a team gateway: attach to whichever gateway owns the PostgreSQL profile now.

``gateway.team_homes`` in config.yaml lists the profile directories of the team's other
gateways (each directory is that gateway's ticket source: its control socket). With a
PostgreSQL store and a non-empty list, the CLI asks :mod:`hermes_es.gateway.failover` for the
live owner among this profile's directory and those, waiting for a standby's takeover when
the owner has just died, instead of using the local gateway. Without the list the local
gateway is used whatever its role: a standby admits the submission in the shared log and the
owner runs it (docs/gateway-protocol.md, "Team gateway").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from hermes_es.gateway.client import STARTING_WAIT_S, GatewayHandle, running_gateway
from hermes_es.gateway.failover import TAKEOVER_WAIT_S, wait_owner
from hermes_es.terminal_text import clean

if TYPE_CHECKING:
    from hermes_es.cli.base import Hermes


def team_dirs(hermes: Hermes) -> list[Path]:
    """This profile's directory then ``gateway.team_homes`` (empty: no team, or not PostgreSQL)."""
    from hermes_es.store.backend import is_postgres_url, resolve_target

    homes = hermes.config().config.gateway.team_homes
    if not homes:
        return []
    target = resolve_target(hermes.db_path, hermes.dir / "config.yaml", option=hermes.store_option)
    if not is_postgres_url(target):
        return []
    dirs = [hermes.dir]
    for home in homes:
        path = Path(home).expanduser()
        if path not in dirs:
            dirs.append(path)
    return dirs


def team_gateway(hermes: Hermes) -> GatewayHandle | None:
    """The gateway the chat should use: the team's live owner, else the local one (or None)."""
    local = running_gateway(hermes.dir, starting_wait=STARTING_WAIT_S)
    team = team_dirs(hermes)
    if not team:
        return local
    if local is None and not any(running_gateway(d) for d in team[1:]):
        return None  # no gateway of the team runs: embedded mode, as without a team
    owner = wait_owner(team, TAKEOVER_WAIT_S)  # GatewayError: exit 1, no gateway owns it
    if owner.paths.root != hermes.dir:
        click.echo(
            f"(through the owner gateway of {clean(str(owner.paths.root))}, port "
            f"{owner.endpoint.port}, epoch {owner.endpoint.epoch})",
            err=True,
        )
    return owner
