"""``copy-store --bulk``: one COPY transaction into an empty PostgreSQL store."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from hermes_es.cli.app import cli
from hermes_es.commands.copy_store import copy_store
from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import ValidationError
from hermes_es.store.backend import open_backend
from tests.pg_server import PgServer
from tests.postgres.test_copy_store import _view
from tests.projections.test_rebuild import populate

TABLES = ("sessions", "messages", "messages_fts", "lineage", "prompts", "deletions")


def _copy(src: str, dst: str, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["sessions", "copy-store", src, dst, *extra])
    return result.exit_code, result.output


def _tables(url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every projection row (message and index ids left out: they follow the log positions)."""
    out = {}
    with psycopg.connect(url) as conn:
        for table in TABLES:
            cols = [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns"
                    " WHERE table_name = %s AND column_name <> 'id' ORDER BY column_name",
                    (table,),
                )
            ]
            if table == "messages_fts":
                cols = ["tsv::text"]
            rows = conn.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall()
            out[table] = sorted(rows, key=repr)
    return out


def test_bulk_copy_equals_the_batched_copy(tmp_path: Path, pg_server: PgServer) -> None:
    """A store with edits, rewinds, compaction, a continuation, a prompt and a delete, copied
    with --bulk: digests equal, verify passes, the same rows in every projection table as the
    batch-by-batch copy, the same view (list, search, transcripts), the indexes in place, and
    a later plain copy-store finds nothing left to copy."""
    source = tmp_path / "source.db"
    with SessionEngine.open(source, actor="test") as eng:
        populate(eng)
    bulk_url, batched_url = pg_server.database(), pg_server.database()
    try:
        code, out = _copy(str(source), bulk_url, "--bulk", "--verify", "--json")
        assert code == 0, out
        summary = json.loads(out)
        assert summary["digests_equal"] is True and summary["verify_failed"] == []
        assert summary["copied"] == summary["events"] > 0
        code, out = _copy(str(source), batched_url)
        assert code == 0, out
        assert _tables(bulk_url) == _tables(batched_url)
        assert _view(bulk_url) == _view(source)
        with psycopg.connect(bulk_url) as conn:
            indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
        assert {"messages_fts_tsv", "messages_fts_ids", "sessions_last_active"} <= indexes
        again = copy_store(open_backend(str(source)), open_backend(bulk_url))
        assert (again.copied, again.digest == again.target_digest) == (0, True)
    finally:
        pg_server.drop(bulk_url)
        pg_server.drop(batched_url)


def test_bulk_copy_into_a_store_with_events_is_refused(tmp_path: Path, pg_url: str) -> None:
    """--bulk into a store that already holds events exits 1 naming why, and the target keeps
    exactly what it had."""
    source = tmp_path / "source.db"
    with SessionEngine.open(source) as eng:
        eng.start_session("cli", cwd="", title="theirs")
    with SessionEngine.open(pg_url) as eng:
        eng.start_session("cli", cwd="", title="mine")
    with pytest.raises(ValidationError, match="already holds events"):
        copy_store(open_backend(str(source)), open_backend(pg_url), bulk=True)
    code, out = _copy(str(source), pg_url, "--bulk")
    assert code == 1 and "already holds events" in out and "Traceback" not in out
    with psycopg.connect(pg_url) as conn:
        titles = [r[0] for r in conn.execute("SELECT title FROM sessions")]
        events = conn.execute("SELECT COUNT(*) FROM events").fetchone()
    assert titles == ["mine"] and events == (1,)


def test_bulk_copy_into_sqlite_is_refused(tmp_path: Path, pg_url: str) -> None:
    """--bulk into a SQLite target is refused (exit 1) and creates no file."""
    with SessionEngine.open(pg_url) as eng:
        eng.start_session("cli", cwd="")
    target = tmp_path / "target.db"
    code, out = _copy(pg_url, str(target), "--bulk")
    assert code == 1 and "--bulk copies into a PostgreSQL store" in out
    assert not target.exists()
