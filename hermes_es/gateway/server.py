"""Running a gateway process: one per profile, 127.0.0.1 only, published once ready, SIGTERM drains.

``run`` takes the profile's lock (a second gateway refuses, naming the first one's pid), binds a
free loopback port, starts uvicorn with the app, and once the lifespan has recovered and the
server listens writes ``gateway.json`` (0600: host, port, pid, instance id, epoch). SIGTERM or
SIGINT: admit no new turns, let running ones finish (bounded), then exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import logging
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import msgspec
import uvicorn

from hermes_es.errors import HermesError
from hermes_es.gateway.app import GatewayState, create_app
from hermes_es.gateway.authority import DRAIN_SECONDS
from hermes_es.gateway.control import ControlServer
from hermes_es.gateway.paths import Endpoint, GatewayPaths
from hermes_es.gateway.trace import ENV as TRACE_ENV
from hermes_es.gateway.trace import traced_protocol
from hermes_es.gateway.wire import GatewayWebSocketProtocol
from hermes_es.home import profile_dir

log = logging.getLogger("hermes.gateway")


LOST_EXIT = 1
"""Exit code of an owner that lost its ownership (another gateway may own the profile)."""

SWITCH_INTERVAL_S = 0.001
"""The gateway process's GIL switch interval (CPython's default is 5 ms). Its two busy
threads are the event loop and the writer: every SQLite call the writer makes releases the
GIL, and getting it back from a busy loop took up to a whole interval each time, so a 5 ms
interval stretched a group commit (and the admission waiting on it) by several of them, and
let the writer stall the loop mid fan-out for as long (bench/README.md, bench_gateway,
"End to end, session 4")."""

GC_THRESHOLDS = (20_000, 20, 20)
"""The gateway process's cyclic garbage collector thresholds (CPython's: 700, 10, 10). A
turn leaves a few dozen container objects alive (its window, its heads, caches), so with
the defaults the collector ran a young collection every few turns and promoted all of it
through the older generations, every pass stopping the loop and the writer: about a tenth
of the process's CPU time under the end-to-end bench. What the start-up loaded (modules,
the configuration, the recovered heads) is frozen once the gateway is ready (``gc.freeze``):
the collector never scans it again (bench/README.md, bench_gateway, "The event loop's
share of a turn")."""


class GatewayRunningError(HermesError):
    """Another gateway already runs for this profile."""


@contextlib.contextmanager
def profile_lock(paths: GatewayPaths, profile: str | None = None) -> Iterator[IO[str]]:
    """Hold the profile's gateway lock, or raise naming the pid of the gateway that holds it
    (and the command that stops it)."""
    paths.root.mkdir(parents=True, exist_ok=True)
    handle = open(paths.lock, "a+", encoding="utf-8")  # noqa: SIM115 (held for the run)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(paths)
            stop = f"hermes -p {profile} gateway stop" if profile else "hermes gateway stop"
            raise GatewayRunningError(
                f"a gateway already runs for this profile (pid {pid or 'unknown'});"
                f" '{stop}' stops it",
                subject=str(pid),
            ) from None
        paths.pid.write_text(f"{os.getpid()}\n", encoding="utf-8")
        try:
            yield handle
        finally:  # also when the start-up fails (a bad config.yaml): no stale pid left
            paths.pid.unlink(missing_ok=True)
    finally:
        handle.close()


def _read_pid(paths: GatewayPaths) -> int:
    try:
        return int(paths.pid.read_text(encoding="utf-8").strip() or 0)
    except (OSError, ValueError):
        return 0


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling (the gateway drains first, then stops it)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _write_endpoint(paths: GatewayPaths, endpoint: Endpoint) -> None:
    tmp = paths.endpoint.with_suffix(".json.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(msgspec.json.encode(endpoint))
    os.replace(tmp, paths.endpoint)


def run(
    home: Path, profile: str | None, *, drain_s: float = DRAIN_SECONDS, store: str | None = None
) -> int:
    """Run the gateway of ``profile`` in the foreground until SIGTERM/SIGINT; returns 0.

    ``store``: ``--store`` (a path or ``postgresql://`` URL); else $HERMES_STORE_URL, the
    profile's config.yaml ``store.url``, else its state.db. The gateway's own files (lock,
    gateway.json, socket, pid, log) stay under the profile directory whatever the store.
    """
    name = profile or "default"
    paths = GatewayPaths(profile_dir(home, profile))
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # this process is the gateway's alone
    gc.set_threshold(*GC_THRESHOLDS)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    with profile_lock(paths, profile):
        from hermes_es.config import legacy_reset_findings, load_profile_config

        loaded = load_profile_config(home, profile)
        for finding in legacy_reset_findings(loaded.raw, os.environ):
            print(f"warning: {finding}", file=sys.stderr, flush=True)
        try:
            code, drained = asyncio.run(_serve(home, name, paths, drain_s, store))
        finally:
            paths.endpoint.unlink(missing_ok=True)
            paths.pid.unlink(missing_ok=True)
    if code == LOST_EXIT:
        # Lost the profile to another gateway: a turn thread still waiting on its model must
        # not keep this process (and its writes) alive.
        logging.shutdown()
        sys.stderr.flush()
        os._exit(LOST_EXIT)
    elif not drained:
        # A turn outlived the drain bound: its thread may wait on the model for minutes. The
        # store is closed and the next start records that turn unknown, so exit now (0, as a
        # drain does) instead of when the interpreter's exit would have joined that thread.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


async def _serve(
    home: Path, profile: str, paths: GatewayPaths, drain_s: float, store: str | None
) -> tuple[int, bool]:
    """Serve until a signal; the exit code, and False when running turns outlived the drain
    bound."""
    instance_id = uuid.uuid4().hex
    state = GatewayState(home=home, profile=profile, instance_id=instance_id, store=store)
    # Opened before the server starts: a store that cannot be opened is a plain error (exit 1).
    state.open_engine()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        create_app(state),
        log_level="warning",
        access_log=False,
        lifespan="on",
        # uvicorn's websockets-sansio protocol, each loop iteration's frames in one write
        ws=traced_protocol() if os.environ.get(TRACE_ENV) else GatewayWebSocketProtocol,
        # small JSON frames on loopback: compressing each one per client cost more CPU than
        # it saved (a frame is encoded once but was deflated once per attached client)
        ws_per_message_deflate=False,
        timeout_graceful_shutdown=5,
    )
    server = _Server(config)
    control = ControlServer(
        paths.socket,
        state.tickets,
        profile=profile,
        issuer=instance_id,
        info=lambda: {
            "port": port,
            "instance_id": instance_id,
            "epoch": state.epoch,
            "role": state.team.role if state.team is not None else "owner",
        },
    )
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    def on_signal() -> None:
        if stopping.is_set():
            server.force_exit = True
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    serve_task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serve_task.done():
            await serve_task  # start-up failed: raise what it raised
            return 1, True
        await asyncio.sleep(0.01)
    await state.ready.wait()
    await control.start()
    started_at = time.time()
    team = state.team

    def publish_endpoint() -> None:
        _write_endpoint(
            paths,
            Endpoint(
                host="127.0.0.1",
                port=port,
                pid=os.getpid(),
                instance_id=instance_id,
                epoch=state.epoch,
                profile=profile,
                started_at=started_at,
                role=team.role if team is not None else "owner",
                hostname=socket.gethostname(),
            ),
        )

    if team is not None:
        team.listening("127.0.0.1", port)
        await team.publish()
        team.on_promoted.append(publish_endpoint)  # a standby that takes over says so
    publish_endpoint()
    gc.freeze()  # (after start-up: no collection scans what it loaded again)
    role = team.role if team is not None else "owner"
    log.info("gateway ready on 127.0.0.1:%d (%s, epoch %d)", port, role, state.epoch)
    stop_wait = asyncio.create_task(stopping.wait())
    lost_wait = asyncio.create_task(state.lost.wait())
    await asyncio.wait({serve_task, stop_wait, lost_wait}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    finished = True
    if state.lost.is_set():
        code = LOST_EXIT  # no drain: another gateway may own the profile already
    elif stopping.is_set() and state.authority is not None:
        log.info("draining: no new turns; waiting up to %.0f s for running ones", drain_s)
        finished = await state.authority.drain(drain_s)
        if not finished:
            log.warning("drain bound reached; running turns will be unknown at the next start")
    paths.endpoint.unlink(missing_ok=True)
    await control.stop()
    server.should_exit = True
    await serve_task
    stop_wait.cancel()
    lost_wait.cancel()
    return code, finished
