"""Build and measure one big store (millions of messages) in steps that survive a stop.

``bench_vs_hermes --log-build`` does every step in one process, which at 5,000,000 messages on
a shared machine takes longer than a session. Here each step is its own command over one
folder (``--dir``, default ``bench/out/big``), and the steps keep what they made:

* ``log``: the log only, 50,000 message events a transaction through the recorder (one event
  per message, as live appends store them). Resumable: a re-run starts after the last
  session committed. The messages ``texts`` saved (``messages.marshal``, which may be a link
  to another folder's) are read instead of generated (the generator is sequential: a resume
  would otherwise generate those it skips). Progress every 250,000 messages.
* ``texts``: the workload's texts saved once (``texts.marshal``), and every message's
  fields (``messages.marshal``); ``search`` reads the texts and ``floor`` the messages instead
  of generating them again (at 5,000,000 the generator costs ~6 CPU-minutes a pass). It can
  run beside ``log`` (the other core).
* ``floor``: the batched-insert floor of ``bench_vs_hermes`` (``floor_batched``) for the
  same messages, saved to ``floor.json``.
* ``rebuild``: ``rebuild_projections`` of the store, saved to ``rebuild.json``; ``report``
  prints the ratio of the two (run ``floor`` right after ``rebuild``, so both see the same
  load, and say the load of each).
* ``bytes``: bytes per message, per table and index (``dbstat``).
* ``search``: ``bench_vs_hermes``'s search classes (p50 and p99 per class, recall of
  identifier and CJK queries, the substring-scan floor), this project only.

Every figure is one JSON line on stdout (``bench.common.emit``); progress goes to stderr.

Run: ``python -m bench.big_store STEP [--messages 5000000] [--dir bench/out/big]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import marshal
import os
import time
from pathlib import Path
from typing import Any

from bench import bench_vs_hermes as vs
from bench.common import emit, log, out_dir
from bench.hermes_workload import Msg, Workload

STEPS = ("log", "texts", "floor", "rebuild", "report", "bytes", "search")


def _last_session(db: Path) -> int:
    """The last session the log holds (-1 when empty); a flush ends at a session boundary."""
    import apsw

    if not db.exists():
        return -1
    conn = apsw.Connection(str(db))
    try:
        rows = conn.execute("SELECT MAX(originator_id) FROM events").fetchall()
    except apsw.SQLError:
        return -1
    finally:
        conn.close()
    last = rows[0][0] if rows else None
    return int(str(last).rsplit("_", 1)[1]) if last else -1


def build_log(db: Path, work: Workload, per_txn: int = 50_000) -> None:
    """Write the log of ``work`` after the last session ``db`` already holds."""
    from eventsourcing.persistence import StoredEvent

    from hermes_es import events as ev
    from hermes_es.aggregates import session as agg
    from hermes_es.aggregates.state import SessionState, apply
    from hermes_es.commands.unit_of_work import Store

    last = _last_session(db)
    if (db.parent / "messages.marshal").exists():
        load_messages(db.parent, work)  # saved by ``texts``: not generated again (~6 CPU-min)
    log(f"log: {work.n:,} messages into {db}, after session {last}")
    store = Store(db)
    recorder, datastore = store.recorder, store.datastore
    started, cpu0 = time.perf_counter(), time.process_time()
    pending: list[StoredEvent] = []
    state: SessionState | None = None
    current = -1

    def queue(sid: str, events: list[Any]) -> None:
        assert state is not None
        for event in events:
            apply(state, event, state.version + 1)
            pending.append(
                StoredEvent(originator_id=sid, originator_version=state.version,
                            topic=event.topic, state=ev.encode(event))
            )  # fmt: skip

    def flush() -> None:
        with datastore.transaction() as conn:
            recorder._insert_events(conn, pending)
        pending.clear()

    for done, m in enumerate(work.messages(), 1):
        if done % 250_000 == 0:
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu0
            log(f"  log {done:,}/{work.n:,} ({wall:.0f}s wall, {cpu:.0f}s CPU,"
                f" load {os.getloadavg()[0]:.1f})")  # fmt: skip
        if m.session <= last:
            continue
        sid = work.session_id(m.session)
        if m.session != current:
            if len(pending) >= per_txn:
                flush()
            current = m.session
            state = SessionState(session_id=sid)
            queue(sid, agg.start(sid, at=work.start_at + m.session * 600.0,
                                 source=work.source(m.session), cwd=""))  # fmt: skip
        queue(sid, agg.append(state, [vs._draft(m)], at=m.at))
    if pending:
        flush()
    store.close()
    log(f"log done: {time.perf_counter() - started:.0f}s wall")


def _save(folder: Path, name: str, **fields: Any) -> None:
    fields.update(at=time.strftime("%Y-%m-%d %H:%M:%S"), loadavg=os.getloadavg())
    (folder / name).write_text(json.dumps(fields))


def save_texts(folder: Path, work: Workload) -> None:
    """``texts.marshal`` (the texts) and ``messages.marshal`` (every ``Msg`` as a tuple)."""
    fields = [f.name for f in dataclasses.fields(Msg)]
    rows = [tuple(getattr(m, f) for f in fields) for m in work.messages()]
    with open(folder / "messages.marshal", "wb") as f:
        marshal.dump(rows, f)
    with open(folder / "texts.marshal", "wb") as f:
        marshal.dump([r[fields.index("content")] for r in rows], f)
    log(f"texts: {len(rows):,} messages saved")


def load_messages(folder: Path, work: Workload) -> None:
    """The saved messages as the workload's cache (``messages.marshal``), else generate them."""
    saved = folder / "messages.marshal"
    if not saved.exists():
        work.cache()
        return
    with open(saved, "rb") as f:
        rows = marshal.load(f)
    if len(rows) < work.n:
        work.cache()
        return
    work._cached = [Msg(*r) for r in rows[: work.n]]


def run_floor(folder: Path, work: Workload) -> None:
    """The batched-insert floor of the same messages (generated first, not timed)."""
    load_messages(folder, work)
    log(f"floor: {work.n:,} rows, load {os.getloadavg()[0]:.1f}")
    wall, cpu = vs.floor_batched(folder / "floor_batched.db", work)
    _save(folder, "floor.json", wall=wall, cpu=cpu, messages=work.n)
    log(f"floor: {wall:.1f}s wall, {cpu:.1f}s CPU")


def run_rebuild(folder: Path, db: Path, reader: bool | None = None) -> None:
    """``rebuild`` of every projection, with progress.

    ``cpu`` is this (the writing) thread's CPU time; ``process_cpu`` the writing process's,
    every thread (the background WAL checkpoints run in a thread of their own);
    ``reader_cpu`` the reader process's (``hermes_es.projections.rebuild_reader``; 0 when
    the rebuild ran in one process).
    """
    from hermes_es.projections.rebuild import rebuild

    t0, c0, k0 = time.perf_counter(), time.thread_time(), _children_cpu()
    p0 = time.process_time()

    def progress(done: int, total: int) -> None:
        if done % 250_000 < 5000:
            log(f"  rebuild {done:,}/{total:,} ({time.perf_counter() - t0:.0f}s wall,"
                f" {time.thread_time() - c0:.0f}s CPU, load {os.getloadavg()[0]:.1f})")  # fmt: skip

    events = rebuild(db, progress, reader=reader)
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    reader_cpu, process_cpu = _children_cpu() - k0, time.process_time() - p0
    _save(folder, "rebuild.json", wall=wall, cpu=cpu, process_cpu=process_cpu,
          reader_cpu=reader_cpu, events=events)  # fmt: skip
    log(f"rebuild: {events:,} events, {wall:.1f}s wall, {cpu:.1f}s CPU writing,"
        f" {reader_cpu:.1f}s CPU reading")  # fmt: skip


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def report(folder: Path, n: int) -> None:
    """The rebuild against the floor (each with the load it ran at)."""
    f = json.loads((folder / "floor.json").read_text())
    r = json.loads((folder / "rebuild.json").read_text())
    reader_cpu = r.get("reader_cpu", 0.0)
    emit(
        vs.BENCH, "rebuild", value=r["events"] / r["wall"], unit="events/s",
        floor=n / f["wall"], ratio=round(f["wall"] / r["wall"], 3),
        cpu_ratio=round(f["cpu"] / r["cpu"], 3),
        process_cpu_ratio=round(f["cpu"] / r.get("process_cpu", r["cpu"]), 3),
        total_cpu_ratio=round(f["cpu"] / (r["cpu"] + reader_cpu), 3),
        target=0.8, ok=f["wall"] / r["wall"] >= 0.8, wall=round(r["wall"], 1),
        cpu=round(r["cpu"], 1), process_cpu=round(r.get("process_cpu", r["cpu"]), 1),
        reader_cpu=round(reader_cpu, 1), floor_wall=round(f["wall"], 1),
        floor_cpu=round(f["cpu"], 1), events=r["events"], messages=n, floor_at=f["at"],
        floor_load=f["loadavg"], rebuild_at=r["at"], rebuild_load=r["loadavg"],
    )  # fmt: skip


def store_bytes(db: Path, n: int) -> None:
    """Bytes per message in all and per table and index."""
    stat = vs.dbstat(db)
    emit(vs.BENCH, "bytes_per_message", value=sum(stat.values()) / n, unit="B/msg", messages=n)
    emit(vs.BENCH, "bytes_by_table", value=n, unit="messages",
         engine={k: round(v / n, 1) for k, v in stat.items()})  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run one step."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("step", choices=STEPS)
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None, help="default bench/out/big")
    parser.add_argument("--rounds", type=int, default=3, help="search: passes per class")
    parser.add_argument(
        "--reader", choices=("auto", "on", "off"), default="auto",
        help="rebuild: with the reader process (default: as rebuild-projections decides)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    folder: Path = args.dir or out_dir() / "big"
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "ours.db"
    work = Workload(args.messages, args.seed)
    if args.step == "log":
        build_log(db, work)
    elif args.step == "texts":
        save_texts(folder, work)
    elif args.step == "floor":
        run_floor(folder, work)
    elif args.step == "rebuild":
        run_rebuild(folder, db, {"auto": None, "on": True, "off": False}[args.reader])
    elif args.step == "report":
        report(folder, args.messages)
    elif args.step == "bytes":
        store_bytes(db, args.messages)
    else:
        texts_file = folder / "texts.marshal"
        if texts_file.exists():
            with open(texts_file, "rb") as f:
                texts = marshal.load(f)[: args.messages]
        else:
            texts = [m.content for m in work.messages()]
        vs.bench_search(None, None, work, db, texts, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
