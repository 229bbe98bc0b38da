"""The Hermes side's results of ``bench_vs_hermes``, kept per Hermes version, workload and size.

Building a store through Hermes' ``SessionDB`` is slow (about 45 minutes for 1,000,000
messages on the shared 2-core machine), and its figures do not depend on this project's code.
So each Hermes result is written once under ``bench/out/hermes-cache/<key>/`` and read back by
later runs:

* ``build.json``: the build's times (bulk, timed appends, their CPU time) and ``dbstat`` bytes;
* ``state.db``: the Hermes store itself (search and the migration figure read it);
* ``search-<digest>.json``: per-class latencies and recall hits for one set of queries and
  passes (the digest covers the queries and the pass count): a record only. Search is timed
  again in every run on the cached store (``bench_vs_hermes.hermes_search``), so its ratios are
  same-run ones.

The key holds the Hermes version, the workload seed, the message count, the number of timed
appends and a digest of every message the workload yields (role, text, tool calls, times), so a
changed workload generator never reads a stale result. ``--hermes-fresh`` ignores the cache.
Each cached result records when and at what load average it was measured.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from bench.common import out_dir
from bench.hermes_workload import Workload


def workload_digest(work: Workload) -> str:
    """SHA-256 (16 hex digits) over every message ``work`` yields, in order."""
    digest = hashlib.sha256(f"{work.n}:{work.seed}:{work.size}".encode())
    for m in work.messages():
        digest.update(
            json.dumps(
                [m.session, m.role, m.content, m.tool_calls, m.tool_call_id, m.tool_name, m.at],
                ensure_ascii=False,
            ).encode()
        )
    return digest.hexdigest()[:16]


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


class HermesCache:
    """One (Hermes version, workload, size, timed appends) entry of the cache."""

    def __init__(
        self,
        version: str,
        work: Workload,
        timed: int,
        *,
        fresh: bool = False,
        folder: Path | None = None,
    ) -> None:
        self.key = f"v{version}-seed{work.seed}-n{work.n}-t{timed}-{workload_digest(work)}"
        self.folder = folder or out_dir() / "hermes-cache" / self.key
        """``folder``: a store kept elsewhere (``--store-dir``), results written beside it."""
        self.fresh = fresh

    @property
    def db(self) -> Path:
        """Where the Hermes store of this entry lives."""
        return self.folder / "state.db"

    def _read(self, name: str) -> dict[str, Any] | None:
        path = self.folder / name
        if self.fresh or not path.exists():
            return None
        result: dict[str, Any] = json.loads(path.read_text())
        return result

    def _write(self, name: str, value: dict[str, Any]) -> None:
        record = stamp(value)
        tmp = self.folder / (name + ".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(self.folder / name)

    def build(self) -> dict[str, Any] | None:
        """The cached build result, if it and its store are present."""
        found = self._read("build.json")
        return found if found is not None and self.db.exists() else None

    def start_build(self) -> Path:
        """An empty folder for a new build (any earlier partial one removed)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        return self.db

    def save_build(self, value: dict[str, Any]) -> None:
        """Record a finished build (its store is already in place)."""
        self._write("build.json", value)

    def save_search(self, queries: dict[str, Any], value: dict[str, Any]) -> None:
        """Record a search result for these queries and passes."""
        self._write(f"search-{_digest(queries)}.json", value)


def cached_list(version: str, sessions: int, runs: int) -> Path:
    """Where the Hermes ``sessions list`` cold start at ``sessions`` sessions is kept."""
    folder = out_dir() / "hermes-cache"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"v{version}-list-{sessions}-r{runs}.json"


def stamp(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` with the time and load average of now (a result about to be cached)."""
    return {
        **value,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }
