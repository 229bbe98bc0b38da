"""A store URL that cannot work: the real ``hermes`` command names what was wrong, exits 1, prints
no traceback and no password, and creates nothing.

Each case runs the installed ``hermes`` entry point as a subprocess against a real server: a
role whose password is checked, a database that does not exist, a port nobody listens on, a
role that may not create the ``pg_trgm`` extension, and a second server that has no
``pg_trgm`` at all (its contrib files left out).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.pg_server import PgServer

HERMES = str(Path(sys.executable).with_name("hermes"))
QUICK = "connect_timeout=1"
"""The pool's wait for a connection (the default is 5 s)."""


def _hermes(home: Path, url: str, *args: str) -> tuple[int, str]:
    """Run ``hermes --store URL ARGS`` (exit code, stderr and stdout together)."""
    env = {**os.environ, "HERMES_HOME": str(home)}
    env.pop("HERMES_STORE_URL", None)
    done = subprocess.run(
        [HERMES, "--store", url, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stderr + done.stdout


WRITE = ("-q", "hello", "--model", "offline")
READ = ("sessions", "stats")


def _refused(
    home: Path,
    url: str,
    *expected: str,
    secret: str = "",
    commands: tuple[tuple[str, ...], ...] = (READ, WRITE),
) -> None:
    """Each command (by default a read and a write) on ``url`` fails cleanly, naming
    ``expected``."""
    for args in commands:
        code, out = _hermes(home, url, *args)
        assert code == 1, (args, out)
        assert out.startswith("Error: "), out
        for text in expected:
            assert text in out, (args, out)
        assert "Traceback" not in out
        if secret:
            assert secret not in out


def _tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public'"
        ).fetchall()
    return [str(r[0]) for r in rows]


def test_wrong_password_is_named(pg_server: PgServer, pg_url: str, tmp_path: Path) -> None:
    """A password the server rejects: the error says password authentication failed for that
    user (not only that no connection came), the password never shows."""
    role = f"pw{os.getpid()}"
    pg_server.require_password(role, "right-one")
    host = f"{pg_server.host}:{pg_server.port}"
    dbname = pg_url.rsplit("/", 1)[1]
    deadline = time.monotonic() + 10
    while True:  # the server reloads pg_hba.conf asynchronously
        try:
            psycopg.connect(f"postgresql://{role}@{host}/{dbname}", connect_timeout=2).close()
        except psycopg.OperationalError:
            break
        assert time.monotonic() < deadline, "pg_hba.conf was not reloaded"
        time.sleep(0.1)
    url = f"postgresql://{role}:wrong-one@{host}/{dbname}?{QUICK}"
    _refused(
        tmp_path,
        url,
        f"could not reach the store at postgresql://{role}:***@{host}/{dbname}",
        f'password authentication failed for user "{role}"',
        secret="wrong-one",
    )
    assert _tables(pg_url) == []


def test_missing_database_and_dead_port_are_named(pg_server: PgServer, tmp_path: Path) -> None:
    """A database that does not exist and a port nobody listens on: each error says which."""
    host = f"{pg_server.host}:{pg_server.port}"
    _refused(
        tmp_path,
        f"postgresql://postgres@{host}/no_such_db?{QUICK}",
        'database "no_such_db" does not exist',
    )
    assert pg_server.execute("SELECT 1 FROM pg_database WHERE datname = 'no_such_db'") == []
    _refused(tmp_path, f"postgresql://postgres@127.0.0.1:1/x?{QUICK}", "Connection refused")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:s3cret@127.0.0.1:notaport/db", "port 'notaport' is not a port number"),
        ("postgresql://u:s3cret@[::1/db", "is not a valid PostgreSQL URL"),
        ("postgresql://u:s3cret@127.0.0.1/db?no_such_option=1", "no_such_option"),
        ("postgresql://u:s3cret@127.0.0.1", "names no database"),
        ("postgres+async://u:s3cret@127.0.0.1/db", "unsupported scheme"),
    ],
)
def test_malformed_url_is_named(url: str, expected: str, tmp_path: Path) -> None:
    """A URL that cannot be parsed or names no database: a clear error before any connect,
    the password replaced by ``***`` even where the parser quotes the URL back."""
    _refused(tmp_path, url, expected, secret="s3cret")


def test_role_that_may_not_create_pg_trgm(pg_server: PgServer, pg_url: str, tmp_path: Path) -> None:
    """A role without CREATE on a database that has no ``pg_trgm`` yet: the error says the
    role may not create it and how to get it; nothing is created."""
    dbname = pg_url.rsplit("/", 1)[1]
    role = f"nocreate{os.getpid()}"
    pg_server.execute(f"CREATE ROLE {role} LOGIN")
    pg_server.execute("DROP EXTENSION pg_trgm", dbname=dbname)
    pg_server.execute(f"REVOKE CREATE ON DATABASE {dbname} FROM PUBLIC")
    url = f"postgresql://{role}@{pg_server.host}:{pg_server.port}/{dbname}"
    _refused(
        tmp_path,
        url,
        "could not open the store at",
        "may not create the pg_trgm extension",
        "CREATE EXTENSION pg_trgm",
        "nothing was changed",
        commands=(WRITE,),  # a read finds no store: "no sessions yet"
    )
    assert _tables(pg_url) == []


@pytest.fixture(scope="module")
def server_without_trgm() -> Iterator[PgServer]:
    """A second real server whose installation has no ``pg_trgm``."""
    server = PgServer(missing=("pg_trgm",))
    try:
        server.start()
        assert server.execute(
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_trgm'"
        ) == [(0,)]
        yield server
    finally:
        server.stop()


def test_server_without_pg_trgm(server_without_trgm: PgServer, tmp_path: Path) -> None:
    """A server without the extension: the error says so and to install the contrib modules
    on the server; the database stays empty."""
    url = server_without_trgm.database()
    _refused(
        tmp_path,
        url,
        "the server has no pg_trgm extension",
        "postgresql-contrib",
        "nothing was changed",
        commands=(WRITE,),
    )
    _refused(tmp_path, url, "no sessions yet", commands=(READ,))
    assert _tables(url) == []


def test_a_store_error_no_command_expected_is_an_error_line(pg_url: str, tmp_path: Path) -> None:
    """A statement the server refuses where no command expects it (here a projection table
    someone dropped by hand): an error line naming the store and the server's reason, exit 1,
    no traceback."""
    from hermes_es.commands.engine import SessionEngine

    with SessionEngine.open(pg_url) as eng:
        sid = eng.start_session("cli", cwd="")
        eng.append_message(sid, "user", "findable words")
    with psycopg.connect(pg_url) as conn:
        conn.execute("DROP TABLE messages_fts")
    code, out = _hermes(tmp_path, pg_url, "sessions", "search", "findable")
    assert code == 1, out
    assert out.startswith(f"Error: {pg_url}: "), out
    assert 'relation "messages_fts" does not exist' in out
    assert "Traceback" not in out
