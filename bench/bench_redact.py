"""Benchmark: redaction quality on the test corpus, a maintained detector beside it, and speed.

1. Corpus figures (tests/redact_corpus.py: 72 kinds x 4 contexts, 56 look-alikes x 4): recall,
   false positives and misses per kind for ``hermes_es.redact.redact`` now and, when git can
   show it, for the module as it was at ``--before`` (the same corpus, the same run).
2. The same corpus through detect-secrets (PyPI ``detect-secrets``, Yelp's maintained rule set:
   provider regexes, keyword detector, entropy detectors), when it is installed
   (``pip install '.[bench]'``), used as a redactor three ways: scanning each line
   (``scan_line``), scanning the text as a file (``SecretsCollection.scan_file``, what
   ``detect-secrets scan`` does), and that file scan with each finding widened to the whole
   token around it (its provider rules report only a prefix such as ``ghp``); plus ours
   followed by detect-secrets (the union).
3. Speed: ``redact`` over ``--messages`` transcript-sized messages (~300 bytes; every 20th
   holds a corpus secret), as an export calls it, now and at ``--before``. Floor: one pass of
   one compiled regex that finds every long token (the least a redactor must do).

Prints one JSON object per line. Run: ``python -m bench.bench_redact [--messages 20000] [--quick]``
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

from bench.common import BENCH_DIR, emit, log, ratio
from hermes_es.redact import redact
from tests.redact_corpus import CONTEXTS, LOOKALIKES, Evaluation, evaluate, secret_cases

WORDS = (
    "the", "session", "agent", "message", "search", "index", "tool", "call", "result", "error",
)  # fmt: skip
BEFORE = "bb047e2"
"""main before the redaction work of issue 11 (the 45-kind rule set)."""


def _report(name: str, result: Evaluation, seconds: float) -> None:
    emit(
        "bench_redact",
        f"corpus recall: {name}",
        value=round(result.recall * 100, 2),
        unit="%",
        caught=result.caught,
        total=result.total,
        kinds=result.kinds,
        false_positives=len(result.false_positives),
        lookalikes=result.lookalikes,
        misses_by_kind=dict(sorted(result.misses.items())),
        false_positive_texts=sorted({t for _, t in result.false_positives})[:20],
        seconds=round(seconds, 3),
    )


def _timed(redactor: Callable[[str], str]) -> tuple[Evaluation, float]:
    start = time.perf_counter()
    result = evaluate(redactor)
    return result, time.perf_counter() - start


def _module_at(rev: str) -> ModuleType | None:
    """``hermes_es/redact.py`` as it was at ``rev`` (None when git cannot show it)."""
    try:
        source = subprocess.run(
            ["git", "show", f"{rev}:hermes_es/redact.py"],
            cwd=BENCH_DIR.parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    spec = importlib.util.spec_from_loader(f"redact_{rev}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    exec(compile(source, f"{rev}:hermes_es/redact.py", "exec"), module.__dict__)
    return module


_TOKEN_AROUND = r"[^\s\"'`,;]*"


def _widen(text: str, found: str) -> list[str]:
    """Every whitespace/quote-delimited token of ``text`` that contains ``found``."""
    pattern = re.compile(_TOKEN_AROUND + re.escape(found) + _TOKEN_AROUND)
    return [m.group(0) for m in pattern.finditer(text)]


@contextmanager
def _detect_secrets() -> Iterator[dict[str, Callable[[str], str]] | None]:
    """detect-secrets as three redactors, inside its default settings (None: not installed)."""
    try:
        from detect_secrets import SecretsCollection
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings
    except ImportError:
        yield None
        return
    folder = tempfile.mkdtemp(prefix="bench-redact-")
    path = os.path.join(folder, "snippet.txt")

    def found_in_file(text: str) -> list[str]:
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
        collection = SecretsCollection()
        collection.scan_file(path)
        return [s.secret_value for _, s in collection if s.secret_value]

    def replace_all(text: str, secrets: list[str]) -> str:
        for secret in sorted(set(secrets), key=len, reverse=True):
            text = text.replace(secret, "[REDACTED]")
        return text

    def by_line(text: str) -> str:
        found = [s.secret_value for line in text.splitlines() for s in scan_line(line)]
        return replace_all(text, [s for s in found if s])

    def by_file(text: str) -> str:
        return replace_all(text, found_in_file(text))

    def by_file_widened(text: str) -> str:
        return replace_all(text, [t for s in found_in_file(text) for t in _widen(text, s)])

    with default_settings():
        try:
            yield {
                "detect-secrets scan_line": by_line,
                "detect-secrets scan_file": by_file,
                "detect-secrets scan_file, findings widened to the token": by_file_widened,
            }
        finally:
            if os.path.exists(path):
                os.unlink(path)
            os.rmdir(folder)


def _messages(n: int) -> list[str]:
    """``n`` transcript-sized messages (~300 bytes of prose); every 20th holds a corpus secret."""
    cases = secret_cases()
    out: list[str] = []
    for i in range(n):
        words = " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(50))
        out.append(f"{words} {cases[i % len(cases)].snippet}" if i % 20 == 0 else words)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000, help="Messages in the speed run.")
    parser.add_argument("--before", default=BEFORE, help="git revision of the 'before' rules.")
    parser.add_argument("--quick", action="store_true", help="2,000 messages in the speed run.")
    args = parser.parse_args()
    log(f"corpus: {len({c.kind for c in secret_cases()})} kinds x {len(CONTEXTS)} contexts, "
        f"{len(LOOKALIKES)} look-alikes")  # fmt: skip
    now, seconds = _timed(redact)
    _report("hermes_es.redact (this commit)", now, seconds)
    old = _module_at(args.before)
    if old is None:
        emit("bench_redact", f"corpus recall: before ({args.before})", value=None, unit="%",
             note="git could not show the old module")  # fmt: skip
    else:
        before, seconds = _timed(old.redact)
        _report(f"hermes_es.redact at {args.before} (before)", before, seconds)
    with _detect_secrets() as detectors:
        if detectors is None:
            emit("bench_redact", "corpus recall: detect-secrets", value=None, unit="%",
                 note="not installed: pip install '.[bench]'")  # fmt: skip
        else:
            for name, redactor in detectors.items():
                log(f"corpus through {name}")
                result, seconds = _timed(redactor)
                _report(name, result, seconds)
            widened = detectors["detect-secrets scan_file, findings widened to the token"]
            union, seconds = _timed(lambda text: widened(redact(text)))
            _report("hermes_es.redact, then detect-secrets (union)", union, seconds)
    messages = _messages(2_000 if args.quick else args.messages)
    size = sum(len(m) for m in messages) / 1e6
    log(f"speed: {len(messages)} messages, {size:.1f} MB")
    floor_re = re.compile(r"[A-Za-z0-9_+/=.-]{20,}")
    start = time.perf_counter()
    for message in messages:
        floor_re.findall(message)
    floor = len(messages) / (time.perf_counter() - start)
    runs = [("redact throughput (this commit)", redact)]
    if old is not None:
        runs.append((f"redact throughput at {args.before} (before)", old.redact))
    for name, redactor in runs:
        start = time.perf_counter()
        for message in messages:
            redactor(message)
        elapsed = time.perf_counter() - start
        emit(
            "bench_redact",
            name,
            value=round(len(messages) / elapsed),
            unit="messages/s",
            mb_per_s=round(size / elapsed, 3),
            floor=round(floor),
            ratio=ratio(len(messages) / elapsed, floor),
            floor_is="one compiled regex finding every long token, one pass per message",
        )


if __name__ == "__main__":
    main()
