"""Shared fixtures: a temporary HERMES_HOME, an engine on it with a deterministic clock, and a
real PostgreSQL server (started once per run, only when a test asks for it)."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_es.commands.engine import SessionEngine

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.pg_server import PgServer
except ModuleNotFoundError:  # pragma: no cover
    from pg_server import PgServer  # type: ignore[no-redef,import-not-found]

START = 1_700_000_000.0
"""Where the test clock starts (2023-11-14, UTC)."""

FD_LIMIT = 64
"""File descriptors the test process may still hold once every test has finished.

A clean run ends with about 15; each engine a test forgets to close keeps three (state.db,
its -wal and -shm) until the process exits, since connections never get garbage-collected.
"""


class Clock:
    """A clock that moves ``step`` seconds forward every time it is read."""

    def __init__(self, start: float = START, step: float = 1.0) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> float:
        """Return the current time, then move forward one step."""
        value = self.now
        self.now += self.step
        return value

    def advance(self, seconds: float) -> None:
        """Jump forward ``seconds``."""
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    """A deterministic clock starting at START and ticking one second per read."""
    return Clock()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh HERMES_HOME directory, also exported as $HERMES_HOME for the test."""
    path = tmp_path / "hermes-home"
    path.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(path))
    return path


BACKENDS = ("sqlite", "postgresql")
"""The store backends engine-level tests run against."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that takes ``engine`` once per backend, unless marked ``sqlite_only``."""
    if "store_backend" in metafunc.fixturenames:
        only_sqlite = any(metafunc.definition.iter_markers("sqlite_only"))
        metafunc.parametrize("store_backend", ("sqlite",) if only_sqlite else BACKENDS)


@pytest.fixture
def engine(
    request: pytest.FixtureRequest, store_backend: str, home: Path, clock: Clock
) -> Iterator[SessionEngine]:
    """A SessionEngine with the deterministic clock, once per backend: on ``home``'s state.db,
    and on a fresh database of the run's PostgreSQL server."""
    if store_backend == "postgresql":
        target: str | Path = request.getfixturevalue("pg_url")
    else:
        target = home
    eng = SessionEngine.open(target, clock=clock, actor="test")
    try:
        yield eng
    finally:
        eng.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A real PostgreSQL server on 127.0.0.1 (a free port), stopped when the run ends."""
    server = PgServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """The URL of a fresh PostgreSQL database (pg_trgm installed), dropped after the test."""
    url = pg_server.database()
    try:
        yield url
    finally:
        pg_server.drop(url)


@pytest.fixture(scope="session", autouse=True)
def _no_leaked_file_descriptors() -> Iterator[None]:
    """Fail the run when tests leave more than FD_LIMIT file descriptors open (Linux only)."""
    yield
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.is_dir():
        return
    gc.collect()
    names = os.listdir(fd_dir)
    if len(names) <= FD_LIMIT:
        return
    targets: dict[str, int] = {}
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        targets[target] = targets.get(target, 0) + 1
    sample = ", ".join(sorted(targets)[:8])
    pytest.fail(
        f"{len(names)} file descriptors are still open after the tests (limit {FD_LIMIT}): "
        f"some test opens an engine or connection it never closes; e.g. {sample}"
    )
