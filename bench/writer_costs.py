"""Where the group-commit writer's time goes: its CPU time a message by stage, and the pages
one group commit writes, by table and index.

The headline workload of ``bench_gateway --only writer`` (``--sessions`` sessions, each
appending ``--messages`` messages, one use case each, submitted from one event loop with
``GroupWriter.submit_async``), run once with each stage of the writer thread timed by that
thread's own CPU clock (``time.thread_time``: the GIL waits are not counted): deciding the
use cases (no SQL), the event rows (compression apart), each projection's rows, the
full-text rows, hand-back, and the rest of ``_run_group`` (``BEGIN``, ``COMMIT``, glue).
The timers themselves cost a few microseconds a message, so the rates are below the
benchmark's; the shares are what this is for. Then one more group of one append per
session is committed with an empty WAL, and its frames are counted by the b-tree each page
belongs to (``dbstat``).

Run: ``python -m bench.writer_costs [--sessions 32] [--messages 200]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import struct
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import apsw

from bench.bench_gateway import TEXT, _grouped
from bench.common import emit, log
from hermes_es.commands import writer as writer_module
from hermes_es.commands.engine import SessionEngine, to_draft
from hermes_es.commands.group_engine import GroupCommitEngine
from hermes_es.commands.unit_of_work import Store
from hermes_es.projections.catalog import ProjectionSet
from hermes_es.projections.messages import MessagesProjector
from hermes_es.projections.search import SearchProjector
from hermes_es.projections.sessions import SessionsProjector
from hermes_es.store import codec, recorder

BENCH = "writer_costs"

STAGES: list[tuple[Any, str, str]] = [
    (writer_module.GroupWriter, "_run_group", "group"),
    (writer_module.GroupWriter, "_run_deferred", "decide"),
    (Store, "_write_pending", "deferred rows"),
    (recorder.ApswApplicationRecorder, "_insert_rows", "event rows"),
    (codec, "pack", "compress"),
    (ProjectionSet, "apply", "projections"),
    (MessagesProjector, "apply_batch", "message rows"),
    (SessionsProjector, "settle", "sessions rows"),
    (SearchProjector, "apply_batch", "full-text rows"),
    (writer_module, "_deliver", "hand-back"),
]
"""What is timed: (owner, attribute, stage). Nested stages are counted in their parents too."""


def _timed(cpu: dict[str, float], stage: str, fn: Callable[..., Any]) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            cpu[stage] += time.thread_time() - start

    return run


def stage_costs(path: Path, sessions: int, messages: int) -> dict[str, float]:
    """Writer-thread CPU µs a message by stage (``rest`` is the group minus what is timed)."""
    cpu: dict[str, float] = collections.defaultdict(float)
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in STAGES]
    try:
        for owner, name, stage in STAGES:
            setattr(owner, name, _timed(cpu, stage, getattr(owner, name)))
        setattr(recorder, "pack", codec.pack)  # noqa: B010 (the recorder imported it by name)
        rate, process, writer_cpu, _, _, _ = _grouped(path, sessions, messages, callers="loop")
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
        setattr(recorder, "pack", codec.pack)  # noqa: B010
    n = sessions * messages
    out = {stage: round(cpu[stage] / n * 1e6, 1) for _, _, stage in STAGES}
    out["event rows (SQL)"] = round(out["event rows"] - out["compress"], 1)
    inside = out["decide"] + out["deferred rows"] + out["full-text rows"]
    out["rest of the group (BEGIN, COMMIT, glue)"] = round(out["group"] - inside, 1)
    out.update(msgs_per_s=round(rate, 1), process_cpu=round(process, 1))
    out["writer_thread_cpu"] = round(writer_cpu, 1)
    return out


def _wal_frames(wal: bytes) -> list[int]:
    """The page number of every frame in a WAL file."""
    page_size = struct.unpack(">I", wal[8:12])[0]
    pages, offset = [], 32
    while offset + 24 + page_size <= len(wal):
        pages.append(struct.unpack(">I", wal[offset : offset + 4])[0])
        offset += 24 + page_size
    return pages


def group_pages(path: Path, sessions: int, messages: int) -> dict[str, Any]:
    """Frames one group of ``sessions`` appends (one each) writes, by b-tree, after every
    session already holds ``messages`` messages."""
    engine = GroupCommitEngine(path)
    try:
        sids = [engine.start_session("cli", cwd="/tmp") for _ in range(sessions)]
        writer = engine.writer

        async def rounds(count: int, first: int) -> None:
            for n in range(first, first + count):
                drafts = [[to_draft({"role": "user", "content": f"{n} {TEXT}"})] for _ in sids]
                await asyncio.gather(
                    *(
                        writer.submit_async(
                            partial(SessionEngine.append_turn, engine, sid, d), pure=True
                        )
                        for sid, d in zip(sids, drafts, strict=True)
                    )
                )

        asyncio.run(rounds(messages, 0))

        def empty_wal() -> None:
            conn = engine.store.datastore.connection()
            conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)

        writer.call(empty_wal, alone=True)
        engine.store.datastore.checkpointer.close()  # nothing copies frames away meanwhile
        before = writer.groups
        asyncio.run(rounds(1, messages))
        groups = writer.groups - before
        frames = _wal_frames(Path(f"{path}-wal").read_bytes())
        reader = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            names = dict(reader.execute("SELECT pageno, name FROM dbstat").fetchall())
        finally:
            reader.close()
    finally:
        engine.close()
    by_tree = collections.Counter(str(names.get(p, "(new page)")) for p in frames)
    return {"commits": groups, "frames": len(frames), "by_btree": dict(by_tree.most_common())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--messages", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log("writer stages (thread CPU) ...")
        stages = stage_costs(Path(tmp) / "stages.db", args.sessions, args.messages)
        emit(BENCH, "writer_stage_cpu_us_per_msg", unit="us/msg", sessions=args.sessions, **stages)
        log("pages of one group commit ...")
        pages = group_pages(Path(tmp) / "pages.db", args.sessions, args.messages)
        emit(BENCH, "group_commit_wal_frames", unit="frames", sessions=args.sessions, **pages)


if __name__ == "__main__":
    main()
