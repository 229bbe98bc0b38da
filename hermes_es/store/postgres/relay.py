"""Messages between the gateways of a team, through PostgreSQL's NOTIFY (live, never stored).

The stored events reach every gateway through the log itself (``notify.py``). What is not
stored travels here: the owner's live ``turn.stream`` items (reply deltas, tool calls and
results) for the clients attached to a standby, and a standby's word to the owner that it
admitted work (``kick``). Each profile has its own channel (``hermes_team_<lock key>``).

A message is a JSON object; its envelope names the sending gateway (``g``), so a gateway skips
what it sent itself. PostgreSQL refuses a payload of 8000 bytes or more: a message whose
envelope would exceed ``MAX_PAYLOAD`` is sent in numbered chunks of its base64-encoded JSON
(``c`` its id, ``k`` the chunk's number, ``n`` how many), which ``Reassembler`` puts back
together. Notifications of one sender are delivered in the order they were committed, and
every listener sees every one committed after its ``LISTEN``: the chunks of a message arrive
together and in order.

``RelaySender`` sends from a thread of its own on a dedicated connection: ``send`` only queues
(the gateway's loop never waits on the network); the thread sends whatever is queued in one
transaction. ``flush`` waits until everything queued so far is committed, so that an item the
owner streamed reaches the listeners before the event that finishes its turn.
"""

from __future__ import annotations

import base64
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec
import psycopg

from hermes_es.store.postgres.team import connect, lock_key

log = logging.getLogger("hermes.store")

MAX_PAYLOAD = 7900
"""Largest NOTIFY payload sent, in bytes (PostgreSQL's limit is 8000, exclusive)."""

CHUNK_BYTES = 5700
"""Raw bytes of a message per chunk (base64 makes 7600 of them, with room for the envelope)."""

MAX_BATCH = 256
"""Most notifications sent in one transaction."""

RECONNECT_S = 0.5

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def channel_for(profile: str) -> str:
    """The profile's team channel (a plain identifier: no quoting needed)."""
    return f"hermes_team_{lock_key(profile)}"


def payloads(sender: str, message: dict[str, Any], *, limit: int = MAX_PAYLOAD) -> list[str]:
    """The NOTIFY payloads carrying ``message`` (one, or its chunks in order)."""
    whole = _encoder.encode({"g": sender, "m": message}).decode()
    if len(whole.encode()) <= limit:
        return [whole]
    raw = _encoder.encode(message)
    size = min(CHUNK_BYTES, max(1, (limit - 200) * 3 // 4))
    parts = [raw[i : i + size] for i in range(0, len(raw), size)]
    chunk_id = f"{time.monotonic_ns():x}"
    return [
        _encoder.encode(
            {
                "g": sender,
                "c": chunk_id,
                "k": k,
                "n": len(parts),
                "d": base64.b64encode(part).decode(),
            }
        ).decode()
        for k, part in enumerate(parts)
    ]


class Reassembler:
    """Turns received payloads back into messages, dropping its own gateway's and malformed
    ones; the chunks of one message are joined once all have arrived."""

    MAX_PENDING = 64
    """Partial messages kept (a sender that died mid-message leaves one behind)."""

    def __init__(self, own: str) -> None:
        self.own = own
        self._parts: dict[tuple[str, str], list[bytes]] = {}

    def feed(self, payload: str) -> tuple[str, dict[str, Any]] | None:
        """The (sender, message) ``payload`` completes, if any."""
        try:
            envelope = _decoder.decode(payload)
            sender = str(envelope["g"])
            if sender == self.own:
                return None
            if "m" in envelope:
                message = envelope["m"]
                return (sender, message) if isinstance(message, dict) else None
            key = (sender, str(envelope["c"]))
            k, n = int(envelope["k"]), int(envelope["n"])
            part = base64.b64decode(envelope["d"])
        except (msgspec.DecodeError, KeyError, TypeError, ValueError):
            log.warning("team relay: a malformed notification was ignored")
            return None
        parts = self._parts.get(key)
        if k == 0:
            parts = self._parts[key] = []
            while len(self._parts) > self.MAX_PENDING:
                self._parts.pop(next(iter(self._parts)))
        if parts is None or len(parts) != k:  # a chunk went missing: drop the message
            self._parts.pop(key, None)
            return None
        parts.append(part)
        if len(parts) < n:
            return None
        del self._parts[key]
        try:
            message = _decoder.decode(b"".join(parts))
        except msgspec.DecodeError:
            return None
        return (sender, message) if isinstance(message, dict) else None


class RelaySender:
    """Sends team messages from a thread of its own (see the module docstring)."""

    def __init__(self, url: str, profile: str, sender: str) -> None:
        self.url = url
        self.channel = channel_for(profile)
        self.sender = sender
        self._queue: deque[str] = deque()
        self._cond = threading.Condition()
        self._queued = 0
        self._sent = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="hermes-pg-relay", daemon=True)
        self.failures = 0

    def start(self) -> RelaySender:
        """Start the sending thread."""
        self._thread.start()
        return self

    def send(self, message: dict[str, Any]) -> None:
        """Queue ``message`` (never blocks)."""
        parts = payloads(self.sender, message)
        with self._cond:
            self._queue.extend(parts)
            self._queued += len(parts)
            self._cond.notify_all()

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until everything queued so far is committed; False after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target = self._queued
            while self._sent < target and not self._stop:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread (what is still queued is dropped: it is live-only)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _take(self) -> list[str]:
        with self._cond:
            while not self._queue and not self._stop:
                self._cond.wait()
            return [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]

    def _done(self, count: int) -> None:
        with self._cond:
            self._sent += count
            self._cond.notify_all()

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while True:
            batch = self._take()
            if not batch:
                break  # stopping
            for attempt in itertools.count():
                try:
                    if conn is None or conn.closed:
                        conn = connect(self.url, application_name="hermes-gateway-relay")
                    with conn.transaction(), conn.cursor() as cur:
                        cur.executemany(
                            "SELECT pg_notify(%s, %s)", [(self.channel, p) for p in batch]
                        )
                    break
                except psycopg.Error as exc:
                    self.failures += 1
                    if conn is not None:
                        conn.close()
                    conn = None
                    if attempt >= 2 or self._stop:  # live-only: drop it rather than lag
                        log.warning("team relay: %d notifications dropped (%s)", len(batch), exc)
                        break
                    time.sleep(RECONNECT_S)
            self._done(len(batch))
        if conn is not None:
            conn.close()


Handler = Callable[[str], None]
"""What a listener calls with each payload of a channel it follows."""
