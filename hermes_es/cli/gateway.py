"""``hermes gateway run|start|stop|status|ensure``: the profile's gateway process.

``run`` stays in the foreground; ``start`` runs it in the background (pid and log under the
profile: ``gateway.pid``, ``gateway.log``); ``stop`` sends SIGTERM (it drains) and waits;
``status`` says whether one runs; ``ensure`` starts one when needed and prints its endpoint.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Any

import click

from hermes_es.cli.base import LazyGroup, echo_json, get_hermes
from hermes_es.errors import HermesError

START_TIMEOUT = 30.0


class GatewayCliError(HermesError):
    """A gateway lifecycle command failed."""


def _endpoint_info(profile_dir: Any) -> dict[str, Any] | None:
    from hermes_es.gateway.paths import GatewayPaths, gateway_runs, read_endpoint

    paths = GatewayPaths(profile_dir)
    endpoint = read_endpoint(paths)
    if endpoint is None or not gateway_runs(paths, endpoint.pid):
        return None  # none, or left by a gateway that died (its pid may be another's now)
    return {
        "running": True,
        "pid": endpoint.pid,
        "host": endpoint.host,
        "port": endpoint.port,
        "url": endpoint.ws_url,
        "instance_id": endpoint.instance_id,
        "epoch": endpoint.epoch,
        "profile": endpoint.profile,
        "started_at": endpoint.started_at,
        "socket": str(paths.socket),
        "role": endpoint.role,
    }


def _live_status(profile_dir: Any) -> dict[str, Any]:
    """Role, epoch and the live owner as the running gateway reports them (``gateway.status``);
    what gateway.json says when it cannot be asked."""
    from hermes_es.gateway.client import GatewayError, running_gateway

    handle = running_gateway(profile_dir)
    if handle is None:
        return {}
    try:
        status = handle.http_call("gateway.status", {}, timeout=5.0)
    except GatewayError as exc:
        return {"status_error": exc.message}
    keys = ("role", "epoch", "owner", "members", "team", "hostname", "draining", "took_over_ms")
    return {k: status[k] for k in keys if k in status}


def _profile_option(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """``hermes gateway CMD -p NAME`` is ``hermes -p NAME gateway CMD``."""
    if value is not None:
        root = ctx.find_root()
        if root.obj is not None:
            raise click.UsageError("give -p once, before or after 'gateway'")
        root.params["profile"] = value


_PROFILE = click.option(
    "-p",
    "--profile",
    default=None,
    expose_value=False,
    is_eager=True,
    callback=_profile_option,
    help="Profile name (default: the default profile).",
)


def _store_option(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """``hermes gateway CMD --store URL`` is ``hermes --store URL gateway CMD``."""
    if value is not None:
        root = ctx.find_root()
        if root.obj is not None or root.params.get("store"):
            raise click.UsageError("give --store once, before or after 'gateway'")
        root.params["store"] = value


_STORE = click.option(
    "--store",
    default=None,
    metavar="URL",
    expose_value=False,
    is_eager=True,
    callback=_store_option,
    help="Session store: a postgresql:// URL or a state.db path"
    " (default: $HERMES_STORE_URL, config.yaml store.url, else the profile's state.db).",
)


@click.group("gateway", cls=LazyGroup)
def gateway_group() -> None:
    """Run the gateway: the one owner of a profile's sessions (attach, queued turns, recovery).

    Example: hermes gateway start && hermes gateway status
    """


@gateway_group.command("run")
@_PROFILE
@_STORE
@click.option(
    "--drain",
    "drain_s",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds SIGTERM waits for running turns.",
)
@click.pass_context
def run_cmd(ctx: click.Context, drain_s: float) -> None:
    """Run the gateway in the foreground until SIGTERM or Ctrl-C.

    Example: hermes gateway run -p work
    """
    from hermes_es.gateway.server import run

    hermes = get_hermes(ctx)
    code = run(hermes.home, hermes.profile, drain_s=drain_s, store=hermes.store_option)
    if code:
        ctx.exit(code)


def _start(ctx: click.Context) -> dict[str, Any]:
    hermes = get_hermes(ctx)
    info = _endpoint_info(hermes.dir)
    if info is not None:
        return {**info, "started": False}
    from hermes_es.gateway.paths import GatewayPaths

    paths = GatewayPaths(hermes.dir)
    hermes.dir.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-c", "from hermes_es.cli import main; main()"]
    if hermes.profile:
        args += ["-p", hermes.profile]
    args += ["gateway", "run"]
    env = dict(os.environ)
    if hermes.store_option:  # through the environment: a URL's password stays off `ps`
        from hermes_es.store.backend import STORE_URL_ENV

        env[STORE_URL_ENV] = hermes.store_option
    with open(paths.log, "ab") as log:
        os.chmod(paths.log, 0o600)
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        info = _endpoint_info(hermes.dir)
        if info is not None and info["pid"] == proc.pid:
            return {**info, "started": True, "log": str(paths.log)}
        if info is not None and proc.poll() is not None:
            return {**info, "started": False}  # a concurrent start's gateway is ready
        code = proc.poll()
        if code is not None and _other_start(paths, proc.pid):
            time.sleep(0.05)  # another start took the profile first: wait for that one
            continue
        if code is not None:
            tail = paths.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            last = tail[-1] if tail else "no output"
            raise GatewayCliError(f"the gateway exited with code {code}: {last} (log: {paths.log})")
        time.sleep(0.05)
    raise GatewayCliError(
        f"the gateway did not become ready in {START_TIMEOUT:.0f} s (log: {paths.log})"
    )


def _other_start(paths: Any, pid: int) -> bool:
    """Whether a gateway other than ``pid`` holds the profile's lock (two starts raced)."""
    from hermes_es.gateway.paths import lock_holder

    holder = lock_holder(paths)
    return bool(holder) and holder != pid


@gateway_group.command("start")
@_PROFILE
@_STORE
@click.option("--json", "as_json", is_flag=True, help="Print the endpoint as JSON.")
@click.pass_context
def start_cmd(ctx: click.Context, as_json: bool) -> None:
    """Start the gateway in the background (pid and log under the profile).

    Example: hermes gateway start
    """
    info = _start(ctx)
    if as_json:
        echo_json(info)
    elif info["started"]:
        click.echo(f"gateway started: pid {info['pid']}, {info['url']} (log: {info['log']})")
    else:
        click.echo(f"gateway already running: pid {info['pid']}, {info['url']}")


@gateway_group.command("ensure")
@_PROFILE
@_STORE
@click.option("--json", "as_json", is_flag=True, help="Print the endpoint as JSON.")
@click.pass_context
def ensure_cmd(ctx: click.Context, as_json: bool) -> None:
    """Start the gateway if it is not running, then print its endpoint.

    Example: hermes gateway ensure --json
    """
    info = _start(ctx)
    if as_json:
        echo_json(info)
    else:
        click.echo(info["url"])


@gateway_group.command("stop")
@_PROFILE
@click.option(
    "--timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds to wait for it to drain and exit.",
)
@click.pass_context
def stop_cmd(ctx: click.Context, timeout: float) -> None:
    """Stop the gateway: no new turns, running ones finish, then it exits.

    With none running it says so and exits 0. Only the process holding the profile's gateway
    lock is signalled: a pid a crashed gateway left in gateway.json or gateway.pid is not.

    Example: hermes gateway stop
    """
    from hermes_es.commands.holders import pid_alive
    from hermes_es.gateway.paths import GatewayPaths, gateway_runs, read_endpoint

    hermes = get_hermes(ctx)
    paths = GatewayPaths(hermes.dir)
    endpoint = read_endpoint(paths)
    candidates = [endpoint.pid] if endpoint is not None else []
    with contextlib.suppress(OSError, ValueError):  # no pid file: gateway.json names it
        candidates.append(int(paths.pid.read_text(encoding="utf-8").strip() or 0))
    pid = next((c for c in candidates if gateway_runs(paths, c)), 0)
    if not pid:
        click.echo("no gateway running")
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid) or _reaped(pid):
            click.echo(f"gateway stopped (pid {pid})")
            return
        time.sleep(0.05)
    raise GatewayCliError(f"the gateway (pid {pid}) did not stop within {timeout:.0f} s")


def _reaped(pid: int) -> bool:
    """True once ``pid`` is a zombie (exited; its parent has not collected it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


@gateway_group.command("status")
@_PROFILE
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_context
def status_cmd(ctx: click.Context, as_json: bool) -> None:
    """Say whether the profile's gateway runs, and where.

    Example: hermes gateway status --json
    """
    hermes = get_hermes(ctx)
    info = _endpoint_info(hermes.dir) or {"running": False}
    if info["running"]:
        info.update(_live_status(hermes.dir))
    if as_json:
        echo_json(info)
    elif info["running"]:
        click.echo(
            f"gateway running: pid {info['pid']}, {info['url']}, {info['role']}, "
            f"epoch {info['epoch']}, instance {info['instance_id']}"
        )
        if info.get("status_error"):
            click.echo(f"warning: it does not answer: {info['status_error']}")
        owner = info.get("owner")
        if info["role"] != "owner":
            if owner:
                click.echo(
                    f"owner: instance {owner['instance_id']} on host {owner['hostname']},"
                    f" {owner['url']}, epoch {owner['epoch']}"
                )
            else:
                click.echo("owner: none live right now")
    else:
        click.echo("no gateway running")
