"""The team pieces of the PostgreSQL store: the ownership lock, the registry, the log listener."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from hermes_es.commands import turns
from hermes_es.commands.engine import SessionEngine
from hermes_es.store.postgres.notify import CHANNEL, LogListener
from hermes_es.store.postgres.store import PgStore
from hermes_es.store.postgres.team import GatewayRegistry, GatewayRow, OwnerLock, lock_key


def _row(instance: str, role: str, backend_pid: int, port: int) -> GatewayRow:
    return GatewayRow(
        instance_id=instance,
        profile="default",
        role=role,
        hostname="h",
        host="127.0.0.1",
        port=port,
        pid=1,
        epoch=1,
        backend_pid=backend_pid,
        started_at=time.time(),
        updated_at=time.time(),
    )


def test_owner_lock_is_exclusive_per_profile_and_handed_over_on_close(pg_url: str) -> None:
    """One holder per profile (another profile has its own lock); a waiter is woken as soon as
    the holder's connection closes, well inside its wait bound."""
    first, second = OwnerLock(pg_url, "default"), OwnerLock(pg_url, "default")
    other = OwnerLock(pg_url, "work")
    try:
        assert lock_key("default") != lock_key("work")
        assert first.try_acquire() and not second.try_acquire()
        assert other.try_acquire()
        assert not second.wait(0.2)
        assert first.check()
        got: list[float] = []
        waiter = threading.Thread(target=lambda: got.append(float(second.wait(5.0))))
        waiter.start()
        time.sleep(0.3)
        released = time.monotonic()
        first.close()
        waiter.join(10)
        handoff = time.monotonic() - released
        assert got == [1.0] and handoff < 2.0, handoff
        assert second.check() and not first.check()
    finally:
        for lock in (first, second, other):
            lock.close()


def test_owner_lock_check_fails_when_its_backend_is_terminated(pg_url: str) -> None:
    """A lock whose server backend ended (as when its host vanished) reports itself lost, and
    the lock is free for another gateway."""
    lock, standby = OwnerLock(pg_url, "default"), OwnerLock(pg_url, "default")
    try:
        assert lock.try_acquire()
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (lock.backend_pid,))
        assert not lock.check()
        assert standby.wait(5.0)
    finally:
        lock.close()
        standby.close()


def test_registry_live_owner_is_the_lock_holder_only(pg_url: str) -> None:
    """The live owner is the owner row whose backend holds the lock: a dead owner's row is
    never returned, and forget_dead removes it."""
    store = PgStore(pg_url)
    lock = OwnerLock(pg_url, "default")
    try:
        registry = GatewayRegistry(store.connection())
        GatewayRegistry(store.connection())  # creating twice is fine
        assert lock.try_acquire()
        registry.publish(_row("dead", "owner", 999_999, 1))
        assert registry.live_owner("default") is None
        registry.publish(_row("live", "owner", lock.backend_pid, 2))
        owner = registry.live_owner("default")
        assert owner is not None and owner.instance_id == "live" and owner.port == 2
        assert [m.instance_id for m in registry.members("default")] == ["live"]
        assert registry.forget_dead("default") == 1
        registry.remove("live")
        assert registry.live_owner("default") is None
    finally:
        lock.close()
        store.close()


def test_log_listener_reports_streams_after_their_commit(pg_url: str) -> None:
    """Commits by another engine reach the listener with their stream ids and newest versions
    (every commit covered, however the notifications were coalesced); nothing committed
    before it started is reported."""
    with SessionEngine.open(pg_url) as engine:
        before = engine.start_session("cli", cwd="")
        seen: list[str] = []
        versions: dict[str, int] = {}
        changed = threading.Event()

        def on_change(streams: dict[str, int]) -> None:
            seen.extend(streams)
            versions.update(streams)
            changed.set()

        listener = LogListener(pg_url, on_change).start()
        try:
            assert listener.ready.wait(10)
            sid = engine.start_session("cli", cwd="")
            for n in range(5):
                engine.append_message(sid, "user", f"m{n}")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and seen.count(sid) == 0:
                changed.wait(0.5)
            time.sleep(0.3)
        finally:
            listener.stop()
        assert sid in seen and before not in seen
        assert versions[sid] == engine.get(sid).version  # the newest version is reported


def test_fenced_turn_start_refused_once_a_newer_epoch_began(pg_url: str) -> None:
    """A team owner's turn start checks its epoch in the same transaction: after another
    gateway began a newer epoch, the old owner starts nothing (the new one may)."""
    with SessionEngine.open(pg_url, actor="uid:1") as engine:
        sid = engine.start_session("cli", cwd="")
        old = turns.begin_epoch(engine, "default", instance_id="a", pid=1)
        turns.admit(engine, sid, submission_id="s1", client_kind="cli", text="one")
        new = turns.begin_epoch(engine, "default", instance_id="b", pid=2)
        with pytest.raises(turns.EpochEndedError, match=f"epoch {old} of profile default"):
            turns.start_next(engine, sid, epoch=old, fence="default")
        assert engine.get(sid).turn_running == 0
        assert turns.start_next(engine, sid, epoch=new, fence="default") == 1


def test_every_write_transaction_notifies_the_log_channel(pg_url: str) -> None:
    """The live stream of a team relies on it: a committed write sends NOTIFY on the log's
    channel (the listener's backstop poll is not what delivers events)."""
    with SessionEngine.open(pg_url) as engine:
        sid = engine.start_session("cli", cwd="")
        with psycopg.connect(pg_url, autocommit=True) as listen:
            listen.execute(f"LISTEN {CHANNEL}")
            engine.append_message(sid, "user", "hello")
            got = [n.channel for n in listen.notifies(timeout=5, stop_after=1)]
        assert got == [CHANNEL]
