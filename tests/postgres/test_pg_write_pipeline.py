"""The pipelined write transaction: a failure reported at commit undoes everything."""

from __future__ import annotations

import psycopg
import pytest

from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import StoreError


def _counts(url: str) -> tuple[int, int, int]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT (SELECT COUNT(*) FROM events), (SELECT COUNT(*) FROM messages),"
            " (SELECT COUNT(*) FROM messages_fts)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


@pytest.mark.parametrize("attempt", range(4))
def test_failure_in_the_last_round_trip_rolls_back_and_the_engine_goes_on(
    pg_url: str, attempt: int
) -> None:
    """A projection write the server refuses (a trigger raising on one message's index row,
    reported only by the final sync with COMMIT) fails the append with a StoreError naming the
    server's reason (however early its result arrived: repeated, since that is a race), leaves
    no event or row behind, and the next append on the same engine succeeds."""
    with SessionEngine.open(pg_url, actor="t") as eng:
        sid = eng.start_session("cli", cwd="")
        eng.append_message(sid, "user", "before")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN RAISE EXCEPTION 'refused by the test trigger'; END $$"
            )
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON messages_fts FOR EACH ROW"
                " WHEN (NEW.tsv @@ 'explode'::tsquery) EXECUTE FUNCTION refuse()"
            )
        before = _counts(pg_url)
        version = eng.get(sid).version
        with pytest.raises(StoreError, match="refused by the test trigger"):
            eng.append_message(sid, "user", "explode now")
        assert _counts(pg_url) == before
        assert eng.get(sid).version == version
        for i in range(4):  # every pooled connection is usable again
            eng.append_message(sid, "user", f"after {i}")
    with psycopg.connect(pg_url) as conn:
        texts = [r[0] for r in conn.execute("SELECT content FROM messages ORDER BY seq")]
    assert texts == ["before", "after 0", "after 1", "after 2", "after 3"]
    events, messages, indexed = _counts(pg_url)
    assert (events - before[0], messages - before[1], indexed - before[2]) == (4, 4, 4)
