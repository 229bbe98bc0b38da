"""Generated session ids never collide: a suffix already used in the same second is replaced by a
fresh one; an explicit duplicate id is still an error."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_es import ids
from hermes_es.commands.delete import delete_session
from hermes_es.commands.engine import SessionEngine
from hermes_es.errors import ValidationError

ONE_SECOND = 1_750_000_000.0


def _frozen_clock() -> float:
    """Every session starts in the same second."""
    return ONE_SECOND


def _suffixes(monkeypatch: pytest.MonkeyPatch, values: list[str]) -> list[str]:
    """Make the id generator hand out ``values`` in order (then fresh random ones); returns
    the list of suffixes it was asked for, to count retries."""
    handed: list[str] = []
    queue: Iterator[str] = iter(values)
    real = ids.secrets.token_hex

    def token_hex(n: int) -> str:
        value = next(queue, None) or real(n)
        handed.append(value)
        return value

    monkeypatch.setattr(ids.secrets, "token_hex", token_hex)
    return handed


def test_colliding_suffix_is_replaced_by_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sessions drawing the same suffix in the same second both start, with distinct ids;
    the second drew again."""
    handed = _suffixes(monkeypatch, ["aaaaaaaa", "aaaaaaaa", "aaaaaaaa", "bbbbbbbb"])
    with SessionEngine.open(tmp_path, clock=_frozen_clock) as engine:
        first = engine.start_session("cli")
        second = engine.start_session("cli")
    assert first.endswith("_aaaaaa") and second.endswith("_bbbbbb")
    assert first[:15] == second[:15]
    assert len(handed) == 4


def test_generated_id_never_reuses_a_deleted_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suffix whose session was deleted (its receipt remains) is not handed out again."""
    _suffixes(monkeypatch, ["cccccccc", "cccccccc", "dddddddd"])
    with SessionEngine.open(tmp_path, clock=_frozen_clock) as engine:
        gone = engine.start_session("cli")
        delete_session(engine.store, gone, reason="test", actor="t")
        fresh = engine.start_session("cli")
    assert gone.endswith("_cccccc") and fresh.endswith("_dddddd")


def test_compression_child_id_retries_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child of a compression split gets a fresh id even when its first draw is taken."""
    _suffixes(monkeypatch, ["eeeeeeee", "eeeeeeee", "ffffffff"])
    with SessionEngine.open(tmp_path, clock=_frozen_clock) as engine:
        parent = engine.start_session("cli")
        engine.append_message(parent, "user", "hello")
        child = engine.continue_session(parent, [{"role": "user", "content": "summary"}])
    assert parent.endswith("_eeeeee") and child.endswith("_ffffff")


def test_explicit_duplicate_id_is_still_an_error(tmp_path: Path) -> None:
    """Naming an id that exists is refused, not silently renamed."""
    with SessionEngine.open(tmp_path) as engine:
        engine.start_session("cli", session_id="20250101_000000_abcdef")
        with pytest.raises(ValidationError, match="already exists"):
            engine.start_session("cli", session_id="20250101_000000_abcdef")


def _start_many(home: Path, count: int) -> tuple[set[str], int]:
    """Start ``count`` sessions in one (frozen) second; the distinct ids and suffix draws."""
    draws = itertools.count()
    real = ids.new_session_id

    def counted(source: str, now: float | None = None) -> str:
        next(draws)
        return real(source, now)

    started: set[str] = set()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ids, "new_session_id", counted)
        with SessionEngine.open(home, clock=_frozen_clock) as engine:
            for _ in range(count):
                started.add(engine.start_session("cli", cwd="/tmp"))
    return started, next(draws)


def test_thousands_of_sessions_in_one_second_all_start(tmp_path: Path) -> None:
    """1,000 sessions started in the same second: every one starts, every id is distinct."""
    started, draws = _start_many(tmp_path, 1_000)
    assert len(started) == 1_000
    assert draws >= 1_000
    assert len({sid[:15] for sid in started}) == 1


@pytest.mark.slow
def test_fifty_thousand_sessions_in_one_second_all_start(tmp_path: Path) -> None:
    """50,000 sessions in one second (about 75 suffix collisions expected among 16.7 million
    6-hex suffixes): no failure, 50,000 distinct ids, and the collisions were retried."""
    started, draws = _start_many(tmp_path, 50_000)
    assert len(started) == 50_000
    assert draws > 50_000
