"""``bench_vs_hermes --store-dir``: the bulk stores are built once, kept and reused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import bench_vs_hermes
from hermes_es.projections.catalog import connect

ARGV = ["--no-hermes", "--sizes", "600", "--timed", "40", "--rounds", "1", "--log-build",
        "--figures", "append,bytes,search"]  # fmt: skip


def _figures(out: str) -> dict[str, dict[str, object]]:
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {str(r["figure"]): r for r in lines}


def _count(path: Path) -> int:
    conn = connect(path)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM messages").fetchall()[0][0])
    finally:
        conn.close()


def test_store_dir_builds_once_and_appends_on_a_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A first run builds the bulk store (rebuild figure); a second reuses the same file,
    and each run appends the timed messages to a fresh copy of it."""
    argv = [*ARGV, "--store-dir", str(tmp_path)]
    assert bench_vs_hermes.main(argv) == 0
    first = _figures(capsys.readouterr().out)
    root = tmp_path / "vs_600"
    bulk = root / "ours-bulk.db"
    assert "rebuild" in first and first["append"]["appended"] == 40
    assert json.loads((root / "ours-bulk.json").read_text())["messages"] == 560
    assert (_count(bulk), _count(root / "ours.db")) == (560, 600)
    built = bulk.stat().st_mtime_ns
    assert bench_vs_hermes.main(argv) == 0
    second = _figures(capsys.readouterr().out)
    assert "rebuild" not in second and second["append"]["appended"] == 40
    assert bulk.stat().st_mtime_ns == built
    assert (_count(bulk), _count(root / "ours.db")) == (560, 600)
    assert second["recall_identifier"]["value"] == 1.0


def test_build_only_needs_store_dir(capsys: pytest.CaptureFixture[str]) -> None:
    """``--build-only`` without ``--store-dir`` is a usage error (exit 2, nothing built)."""
    with pytest.raises(SystemExit) as exc:
        bench_vs_hermes.main(["--no-hermes", "--build-only"])
    assert exc.value.code == 2
    assert "--build-only and --publish need --store-dir" in capsys.readouterr().err
