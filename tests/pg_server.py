"""A real PostgreSQL server for the tests: ``initdb`` into a temporary directory, ``pg_ctl`` start.

The server refuses to run as root, so when the tests run as root the cluster is created and
started as the ``postgres`` system user. It listens on 127.0.0.1 only, on a free port, with its
socket inside the cluster directory. Every test gets a database of its own, copied from a
template that already holds ``pg_trgm`` (and whatever else ``prepare`` creates).
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

SERVER_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
"""Debian keeps ``initdb`` in the server's bin directory, off PATH."""

TEMPLATE = "hermes_template"


def _find(tool: str) -> str:
    for d in SERVER_BIN_DIRS:
        if (d / tool).exists():
            return str(d / tool)
    found = shutil.which(tool)
    if found is None:
        raise RuntimeError(
            f"PostgreSQL's {tool} is not installed: run .ci/run (it installs the Debian"
            " postgresql package) or 'apt-get install postgresql postgresql-contrib'"
        )
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One running cluster; ``database()`` hands out fresh databases.

    ``missing``: extensions this server must not have (say ``("pg_trgm",)``, a server whose
    contrib modules are not installed): it runs a copy of the ``postgres`` binary in a tree
    laid out like Debian's (``usr/lib/postgresql/N/bin``), whose share directory holds links to
    everything of the real one but those extensions' files (PostgreSQL finds its share
    directory relative to its binary).
    """

    def __init__(self, missing: tuple[str, ...] = ()) -> None:
        self.missing = missing
        self.root = Path(tempfile.mkdtemp(prefix="hermes-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.host = "127.0.0.1"
        self.user = "postgres"
        self._as_postgres = os.geteuid() == 0
        self._names = itertools.count(1)
        self._lock = threading.Lock()
        if self._as_postgres:
            shutil.chown(self.root, "postgres")
        os.chmod(self.root, 0o700)

    def _run(self, *argv: str) -> None:
        cmd = list(argv)
        if self._as_postgres:
            cmd = ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(f"'{a}'" for a in argv)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        """Create the cluster and start the server (waits until it accepts connections)."""
        self._run(
            _find("initdb"), "-D", str(self.data), "-A", "trust", "-U", self.user,
            "-E", "UTF8", "--locale=C.UTF-8", "--no-sync",
        )  # fmt: skip
        options = (
            f"-k {self.root} -p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c full_page_writes=off -c max_connections=200 -c shared_buffers=32MB"
        )
        binary = ["-p", self._binary_without(self.missing)] if self.missing else []
        self._run(
            _find("pg_ctl"), "-D", str(self.data), "-o", options, "-l",
            str(self.root / "server.log"), *binary, "-w", "-t", "60", "start",
        )  # fmt: skip
        self.execute(f"CREATE DATABASE {TEMPLATE}")
        if "pg_trgm" not in self.missing:
            self.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm", dbname=TEMPLATE)

    def _binary_without(self, missing: tuple[str, ...]) -> str:
        """A copy of ``postgres`` whose share directory lacks the ``missing`` extensions."""
        bindir = Path(_find("postgres")).parent  # /usr/lib/postgresql/15/bin
        version = bindir.parent.name
        share = bindir.parents[3] / "share" / "postgresql" / version
        if not (share / "extension").is_dir():
            raise RuntimeError(f"no share directory {share} beside {bindir}")
        tree = self.root / "install" / "usr"
        (tree / "lib" / "postgresql" / version / "bin").mkdir(parents=True)
        binary = tree / "lib" / "postgresql" / version / "bin" / "postgres"
        shutil.copy2(bindir / "postgres", binary)
        (tree / "lib" / "postgresql" / version / "lib").symlink_to(bindir.parent / "lib")
        own_share = tree / "share" / "postgresql" / version
        (own_share / "extension").mkdir(parents=True)
        for entry in share.iterdir():
            if entry.name != "extension":
                (own_share / entry.name).symlink_to(entry)
        for entry in (share / "extension").iterdir():
            if not entry.name.startswith(tuple(f"{name}." for name in missing)) and not (
                entry.name.startswith(tuple(f"{name}--" for name in missing))
            ):
                (own_share / "extension" / entry.name).symlink_to(entry)
        return str(binary)

    def require_password(self, role: str, password: str) -> None:
        """Create a login role that must give its password (``scram-sha-256``) over TCP,
        whatever trust the cluster grants every other role."""
        self.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        hba = self.data / "pg_hba.conf"
        rule = f"host all {role} 127.0.0.1/32 scram-sha-256\n"
        hba.write_text(rule + hba.read_text())
        self.execute("SELECT pg_reload_conf()")

    def url(self, dbname: str) -> str:
        """The connection URL of one database."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{dbname}"

    def execute(self, sql: str, dbname: str = "postgres") -> list[tuple[object, ...]]:
        """Run one statement in autocommit mode and return its rows (if any)."""
        import psycopg

        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            cur = conn.execute(sql)
            return list(cur.fetchall()) if cur.description else []

    def database(self) -> str:
        """A fresh database (from the template); returns its URL."""
        with self._lock:
            name = f"t{os.getpid()}_{next(self._names)}"
        self.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return self.url(name)

    def drop(self, url: str) -> None:
        """Drop a database handed out by ``database`` (closing its sessions first)."""
        name = url.rsplit("/", 1)[1]
        self.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        """Stop the server and remove the cluster directory."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._run(_find("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
