"""A rebuild's reader process: reads, decodes and folds the log ahead of the writing process.

A rebuild spends about as much time in Python per event (reading the row, decompressing and
decoding the event, folding the session state, building the projection rows) as in the
full-text inserts. With the reader, that Python work runs in a second process on the other
core: it reads the log batch by batch on its own read-only connection, folds every session,
and runs the very projectors of the rebuild (``ProjectionSet``) against a connection that only
records the statements they would execute. Each batch goes to the writer as one msgpack frame
of statements and their parameters; the writer executes them in order, one transaction a batch,
as the in-process rebuild would have.

A projector that needs to read the tables being built (a compaction or an edit finds the
display order of earlier rows; a delete removes the rows it finds; a compression child's root
is its parent's row) cannot be recorded: such a batch goes to the writer as the raw log rows
instead (``Rows``), and the writer replays it itself, with the touched sessions' states read
back from the heads it has written so far (a head is the folded state, ``encode_state``).
A row that does not decode is named by the reader exactly as ``decode_row`` names it
(``Failed``, raised again by the writer as ``CorruptEventError``).

The protocol (one frame each, ``msgspec`` msgpack, tagged): ``Ops`` and ``Rows`` per batch, then
``End`` once the reader found no event after the last batch, or ``Failed``.
"""

from __future__ import annotations

import contextlib
import os
import queue
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import apsw
import msgspec

from hermes_es.errors import StoreError
from hermes_es.events import SessionDeleted
from hermes_es.projections.base import Change
from hermes_es.projections.catalog import ProjectionSet
from hermes_es.projections.replay_gc import replay_collection
from hermes_es.store.decoding import CorruptEventError

WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")
"""Statements the recording connection records; anything else needs the tables (a read)."""


class Ops(msgspec.Struct, tag=True, array_like=True):
    """A batch the reader applied to a recording connection: the statements, in order."""

    position: int
    """The log position of the batch's last event."""
    count: int
    """Events in the batch."""
    sqls: list[str]
    """Statements first used in this batch (numbered after those of earlier batches)."""
    ops: list[tuple[int, bool, Any]]
    """(statement number, executemany?, parameters: one row, or the list of rows)."""


class Rows(msgspec.Struct, tag=True, array_like=True):
    """A batch whose projection needs to read the tables being built: the raw log rows."""

    position: int
    count: int
    rows: list[tuple[int, str, int, str, bytes]]


class End(msgspec.Struct, tag=True, array_like=True):
    """The log had no event after ``position`` when the reader last looked."""

    position: int
    count: int


class Failed(msgspec.Struct, tag=True, array_like=True):
    """The reader stopped: a row that does not decode (``corrupt``), or an unexpected error."""

    kind: str
    message: str
    position: int | None = None
    stream: str = ""
    version: int = 0
    topic: str = ""
    reason: str = ""


Frame = Ops | Rows | End | Failed
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Frame)
_LENGTH = struct.Struct("<Q")


class ReaderError(StoreError):
    """The reader process stopped without a reason the writer can name otherwise."""


class _NeedsTables(Exception):
    """A projector asked to read the tables being built: the batch goes as raw rows."""


class _Cursor:
    def fetchall(self) -> list[Any]:
        return []


class RecordingConnection:
    """Stands in for the rebuild's connection: records writes, refuses reads."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}
        self.new: list[str] = []
        self.ops: list[tuple[int, bool, Any]] = []

    def _number(self, sql: str) -> int:
        number = self.numbers.get(sql)
        if number is None:
            if not sql.lstrip()[:7].upper().startswith(WRITES):
                raise _NeedsTables(sql)
            number = self.numbers[sql] = len(self.numbers)
            self.new.append(sql)
        return number

    def execute(self, sql: str, params: Any = ()) -> _Cursor:
        """Record one statement."""
        self.ops.append((self._number(sql), False, params))
        return _Cursor()

    def executemany(self, sql: str, rows: Any) -> _Cursor:
        """Record one statement over many rows."""
        self.ops.append((self._number(sql), True, list(rows)))
        return _Cursor()

    def take(self) -> tuple[list[str], list[tuple[int, bool, Any]]]:
        """The statements new since the last take, and the recorded operations (then reset)."""
        new, ops = self.new, self.ops
        self.new, self.ops = [], []
        return new, ops

    def drop(self) -> None:
        """Forget what was recorded since the last take (numbers handed out stay unused)."""
        for sql in self.new:
            del self.numbers[sql]
        self.new, self.ops = [], []


def _batches(
    conn: apsw.Connection, batch: int
) -> Iterator[tuple[list[tuple[Any, ...]], list[Change]]]:
    from hermes_es.projections.rebuild import _changes

    last = 0
    while True:
        rows = conn.execute(
            "SELECT id, originator_id, originator_version, topic, state"
            " FROM events WHERE id > ? ORDER BY id LIMIT ?",
            (last, batch),
        ).fetchall()
        if not rows:
            return
        yield rows, _changes(rows)
        last = rows[-1][0]


def read_log(db_path: str, prefix: str, batch: int, send: Callable[[bytes], None]) -> None:
    """The reader process: every batch of the log as a frame through ``send``, then ``End``."""
    from hermes_es.projections.rebuild import Replayer, is_session_stream
    from hermes_es.store.db import open_db

    position = count = 0
    try:
        conn = open_db(db_path, readonly=True)
        replayer = Replayer(ProjectionSet(prefix, bulk=True))
        recorder = RecordingConnection()
        rec = cast(apsw.Connection, recorder)
        with replay_collection() as tick:
            for rows, changes in _batches(conn, batch):
                frame: Frame
                if any(isinstance(c.event, SessionDeleted) for c in changes):
                    _fold(replayer, changes, is_session_stream)
                    frame = Rows(changes[-1].position, len(changes), rows)
                else:
                    try:
                        replayer._apply(rec, changes)  # folds every state first, then projects
                        new, ops = recorder.take()
                        frame = Ops(changes[-1].position, len(changes), new, ops)
                    except _NeedsTables:
                        recorder.drop()
                        # the states are folded; a fresh set drops what the failed apply noted
                        replayer.pset = ProjectionSet(prefix, bulk=True)
                        frame = Rows(changes[-1].position, len(changes), rows)
                position, count = changes[-1].position, count + len(changes)
                send(_ENCODER.encode(frame))
                tick()
        send(_ENCODER.encode(End(position, count)))
    except CorruptEventError as exc:
        failed = Failed(
            "corrupt", str(exc), exc.position, exc.stream, exc.version, exc.topic, exc.reason
        )
        send(_ENCODER.encode(failed))
    except BrokenPipeError:
        return  # the writer stopped reading (it failed, or was interrupted)
    except BaseException as exc:  # the writer reports it; the reader has no terminal
        message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        with contextlib.suppress(OSError):
            send(_ENCODER.encode(Failed("error", message)))


def _fold(replayer: Any, changes: list[Change], is_session_stream: Any) -> None:
    """The states ``Replayer.feed`` would leave (fold in order; a delete forgets its session)."""
    from hermes_es.aggregates.state import SessionState, apply

    states = replayer.states
    for change in changes:
        if is_session_stream(change.stream):
            state = states.get(change.stream)
            if state is None:
                state = states[change.stream] = SessionState(session_id=change.stream)
            apply(state, change.event, change.version)
        if isinstance(change.event, SessionDeleted):
            states.pop(change.event.session_id, None)


class Reader:
    """The writer's side: starts the reader process and yields its frames.

    The reader is ``python -m hermes_es.projections.rebuild_reader`` of this interpreter (not a
    ``multiprocessing`` child, which would import the caller's main script again), writing
    length-prefixed frames to its standard output.
    """

    def __init__(self, db_path: Path | str, prefix: str, batch: int) -> None:
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p
        )
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(db_path), prefix, str(batch)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert self._process.stdout is not None
        self._out = self._process.stdout
        self.sqls: list[str] = []

    def _read(self) -> bytes | None:
        head = self._out.read(_LENGTH.size)
        if len(head) < _LENGTH.size:
            return None
        (size,) = _LENGTH.unpack(head)
        data = self._out.read(size)
        return data if len(data) == size else None

    def frames(self) -> Iterator[Ops | Rows | End]:
        """Every frame until ``End``; a reader failure raises here."""
        while True:
            data = self._read()
            if data is None:
                code = self._process.wait()
                raise ReaderError(
                    f"the rebuild's reader process stopped without a word (exit code {code});"
                    " nothing was changed"
                )
            frame = _DECODER.decode(data)
            if isinstance(frame, Failed):
                if frame.kind == "corrupt":
                    raise CorruptEventError(
                        position=frame.position, stream=frame.stream, version=frame.version,
                        topic=frame.topic, reason=frame.reason,
                    )  # fmt: skip
                raise ReaderError(
                    f"the rebuild's reader process failed: {frame.message}; nothing was changed"
                )
            if isinstance(frame, Ops):
                self.sqls += frame.sqls
            yield frame
            if isinstance(frame, End):
                return

    def apply(self, conn: apsw.Connection, frame: Ops) -> None:
        """Execute a recorded batch (the caller owns the transaction)."""
        sqls = self.sqls
        for number, many, params in frame.ops:
            if many:
                conn.executemany(sqls[number], params)
            else:
                conn.execute(sqls[number], params)

    def close(self) -> None:
        """Stop the reader (it may still be reading ahead) and wait for it."""
        self._out.close()
        if self._process.poll() is None:
            self._process.terminate()
        self._process.wait(10)


AHEAD = 4
"""Frames the reader may have ready beyond the one the writer is reading: a thread writes them
to the pipe while the reader goes on (the pipe holds 64 KiB, a frame about 2 MB), so on a busy
machine the two processes need not take turns."""


def main(argv: list[str]) -> int:
    """The reader process: ``DB PREFIX BATCH``; frames on standard output."""
    db_path, prefix, batch = argv
    out = sys.stdout.buffer
    ready: queue.Queue[bytes | None] = queue.Queue(AHEAD)
    broken = threading.Event()

    def write() -> None:
        try:
            while (data := ready.get()) is not None:
                out.write(_LENGTH.pack(len(data)))
                out.write(data)
                out.flush()
        except OSError:  # the writer stopped reading
            broken.set()
            while ready.get() is not None:
                pass

    writer = threading.Thread(target=write, name="frames", daemon=True)
    writer.start()

    def send(data: bytes) -> None:
        if broken.is_set():
            raise BrokenPipeError
        ready.put(data)

    try:
        read_log(db_path, prefix, int(batch), send)
    finally:
        ready.put(None)
        writer.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
