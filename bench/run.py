"""Run every benchmark module ``bench/bench_*.py``, collect their JSON lines, print a summary.

Each module runs in its own subprocess (``python -m bench.<name>``), with ``--quick`` when
asked and the module supports it. JSON lines from stdout (or one JSON document, for modules
that print one) are tagged with the module name and written to ``bench/out/results.jsonl``;
stderr passes through as progress.

Run: ``python -m bench.run [--quick] [--only NAME[,NAME]] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import BENCH_DIR, out_dir

QUICK_FALLBACK: dict[str, list[str]] = {
    "bench_tokenizer": ["--n", "20000", "--repeat", "1"],
}
"""Quick-size arguments for modules that have no ``--quick`` flag of their own."""


def discover() -> list[str]:
    """Names of every benchmark module, sorted."""
    return sorted(p.stem for p in BENCH_DIR.glob("bench_*.py"))


def supports_quick(module: str) -> bool:
    """True when the module's own source declares a ``--quick`` option."""
    return '"--quick"' in (BENCH_DIR / f"{module}.py").read_text(encoding="utf-8")


def parse_output(text: str) -> list[dict[str, Any]]:
    """JSON objects from a module's stdout: one per line, or the whole output as one."""
    records: list[dict[str, Any]] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                records.append(value)
    if not records and text.strip():
        try:
            value = json.loads(text)
        except ValueError:
            return []
        if isinstance(value, dict):
            records.append(value)
        elif isinstance(value, list):
            records.extend(v for v in value if isinstance(v, dict))
    return records


def run_module(module: str, quick: bool) -> tuple[list[dict[str, Any]], int, float]:
    """Run one module; returns its records, exit code and wall time."""
    cmd = [sys.executable, "-m", f"bench.{module}"]
    if quick:
        cmd += ["--quick"] if supports_quick(module) else QUICK_FALLBACK.get(module, [])
    print(f"== {module}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=BENCH_DIR.parent, stdout=subprocess.PIPE, text=True, check=False)
    elapsed = time.perf_counter() - start
    records = parse_output(proc.stdout)
    for record in records:
        record.setdefault("bench", module.removeprefix("bench_"))
        record["module"] = module
        record["quick"] = quick
    return records, proc.returncode, elapsed


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def summary_rows(records: list[dict[str, Any]]) -> list[list[str]]:
    """One table row per figure record (``machine`` lines are skipped)."""
    rows = []
    for r in records:
        if r.get("figure") == "machine":
            continue
        if "figure" in r and "value" in r:
            rows.append(
                [
                    r["module"],
                    str(r["figure"]),
                    f"{_fmt(r['value'])} {r.get('unit', '')}".strip(),
                    _fmt(r.get("floor")),
                    _fmt(r.get("ratio")),
                    str(r.get("target", "")),
                    _fmt(r.get("ok")),
                ]
            )
        else:  # a module with its own output shape: show its numbers compactly
            shown = ", ".join(
                f"{k}={_fmt(v)}" for k, v in r.items() if k not in ("module", "quick", "bench")
            )
            rows.append([r["module"], "-", shown, "", "", "", ""])
    return rows


def print_table(rows: list[list[str]]) -> None:
    """A plain aligned text table on stdout."""
    header = ["module", "figure", "value", "floor", "ratio", "target", "ok"]
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    widths[2] = min(widths[2], 90)
    for k, row in enumerate(table):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    """Run the modules, write results.jsonl, print the summary; non-zero if a module failed."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a 1-2 minute smoke run")
    parser.add_argument(
        "--only", default="", help="module names (with or without bench_), comma-separated"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="results file (default bench/out/results.jsonl)"
    )
    args = parser.parse_args(argv)
    modules = discover()
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        wanted = [w if w.startswith("bench_") else f"bench_{w}" for w in wanted]
        missing = [w for w in wanted if w not in modules]
        if missing:
            parser.error(f"no benchmark module {', '.join(missing)}; have {', '.join(modules)}")
        modules = [m for m in modules if m in wanted]
    out = args.out or out_dir() / "results.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    failed: list[str] = []
    with out.open("w", encoding="utf-8") as fh:
        for module in modules:
            found, code, elapsed = run_module(module, args.quick)
            if code != 0:
                failed.append(f"{module} (exit {code})")
            print(
                f"== {module}: {len(found)} records in {elapsed:.1f}s", file=sys.stderr, flush=True
            )
            for record in found:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            fh.flush()
            records.extend(found)
    print_table(summary_rows(records))
    print(f"\nresults: {out}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
