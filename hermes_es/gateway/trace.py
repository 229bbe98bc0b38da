"""Admission timing: where the milliseconds of each ``prompt.submit`` go inside the gateway.

Off unless ``HERMES_GATEWAY_TRACE`` names a file (bench/bench_gateway.py sets it). Each
admission is stamped, with ``time.perf_counter`` (CLOCK_MONOTONIC on Linux, so a client in
another process on the machine can join its own stamps), at each stage of its path:

``received``  uvicorn's protocol got the frame's bytes from the socket (``traced_protocol``);
``read``      the WebSocket handler has the request's text (after uvicorn and Starlette);
``queued``    the admission use case was handed to the writer;
``run``       the writer began running it (its group is being decided);
``committed`` the group that holds it committed (stamped on the writer thread);
``resumed``   the loop has the result (after the writer's hand-back);
``written``   the answer frame was handed to the transport.

With ``HERMES_GATEWAY_TRACE_CPU=1`` each stamp also reads the CPU clocks of the event
loop's thread and of the writer's thread (``time.pthread_getcpuclockid``): on a shared
machine wall-clock spans mostly measure how long the scheduler left the process waiting,
while the loop's CPU time spent during a span says how much other work the loop did before
it got to this admission. Reading a thread's CPU clock is a system call (2-12 µs here), so
it is off by default: the wall-clock stamps cost well under a microsecond each.

When the gateway stops, the stamps go to the file as JSON: ``{"admissions": {submission_id:
{stage: [wall] or [wall, loop_cpu, writer_cpu]}}, "groups": n}``. Nothing here changes what
the gateway does.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec

ENV = "HERMES_GATEWAY_TRACE"
CPU_ENV = "HERMES_GATEWAY_TRACE_CPU"

T = TypeVar("T")

STAGES = ("received", "read", "queued", "run", "committed", "resumed", "written")

ACTIVE: AdmissionTrace | None = None
"""This process's trace (``from_env``), for the traced protocol."""

RECEIVED = "hermes.received_at"
"""The scope key where the traced protocol leaves the stamp of the last bytes it received."""


class AdmissionTrace:
    """Stamps of every admission of this run, dumped to ``path`` at shut-down."""

    def __init__(self, path: Path, *, cpu: bool = False) -> None:
        self.path = path
        self.cpu = cpu
        self.admissions: dict[str, dict[str, tuple[float, ...]]] = {}
        self.frames: dict[int, str] = {}
        """id(answer frame) → submission id, until the frame is written."""
        self._group = 0
        self._commits: dict[int, tuple[float, ...]] = {}
        self._runs: dict[str, int] = {}
        self._lock = threading.Lock()
        self._loop_clock = time.pthread_getcpuclockid(threading.get_ident())
        """(Created on the loop's thread.)"""
        self._writer_clock = self._loop_clock

    def now(self) -> tuple[float, ...]:
        """Wall clock (then, with ``cpu``, the loop thread's and the writer thread's CPU
        clocks)."""
        if not self.cpu:
            return (time.perf_counter(),)
        return (
            time.perf_counter(),
            time.clock_gettime(self._loop_clock),
            time.clock_gettime(self._writer_clock),
        )

    @classmethod
    def from_env(cls) -> AdmissionTrace | None:
        """A trace when ``HERMES_GATEWAY_TRACE`` is set, else None."""
        global ACTIVE
        path = os.environ.get(ENV, "")
        ACTIVE = cls(Path(path), cpu=os.environ.get(CPU_ENV, "") == "1") if path else None
        return ACTIVE

    def watch(self, store: Any) -> None:
        """Stamp each group transaction's commit (the writer opens one per group, on its
        thread: that thread's CPU clock is read from then on)."""
        group = getattr(store, "group_transaction", None)
        if group is None:
            return

        @contextlib.contextmanager
        def stamped() -> Iterator[Any]:
            if self.cpu:
                self._writer_clock = time.pthread_getcpuclockid(threading.get_ident())
            with self._lock:
                self._group += 1
                number = self._group
            with group() as stored:
                yield stored
            self._commits[number] = self.now()

        store.group_transaction = stamped

    def mark(self, key: str, stage: str, at: tuple[float, ...] | None = None) -> None:
        """Stamp ``stage`` of the admission ``key`` (the first stamp of a stage wins)."""
        stamps = self.admissions.setdefault(key, {})
        if stage not in stamps:
            stamps[stage] = at or self.now()

    def job(self, key: str, fn: Callable[[], T]) -> Callable[[], T]:
        """``fn`` stamping ``run`` (and its group) when the writer runs it."""

        def run() -> T:
            if key not in self._runs:
                self._runs[key] = self._group
                self.admissions.setdefault(key, {}).setdefault("run", self.now())
            return fn()

        return run

    def answer(self, key: str, frame: bytes) -> None:
        """The answer frame of admission ``key`` is queued for its client."""
        self.frames[id(frame)] = key

    def written(self, frame: bytes) -> None:
        """A frame was handed to the transport: stamp it if it is a traced answer."""
        key = self.frames.pop(id(frame), None)
        if key is not None:
            self.mark(key, "written")

    def dump(self) -> None:
        """Write the stamps (with each admission's commit time) to the file."""
        for key, number in self._runs.items():
            committed = self._commits.get(number)
            if committed is not None and key in self.admissions:
                self.admissions[key]["committed"] = committed
        body = {"admissions": self.admissions, "groups": self._group}
        self.path.write_bytes(msgspec.json.encode(body))


def traced_protocol() -> type[Any]:
    """The gateway's WebSocket protocol (``wire.py``), stamping when each frame's bytes
    arrive (into the connection's ASGI scope, under ``RECEIVED``). Used only while tracing."""
    from hermes_es.gateway.wire import GatewayWebSocketProtocol

    class Traced(GatewayWebSocketProtocol):
        def data_received(self, data: bytes) -> None:
            scope = getattr(self, "scope", None)
            if scope is not None and ACTIVE is not None:
                scope[RECEIVED] = ACTIVE.now()
            super().data_received(data)

    return Traced
