"""Shared benchmark helpers: timing, percentiles, JSON-line output, machine info, synthetic text.

Every benchmark module prints one JSON object per line (``emit``). A figure line carries
``bench`` (module), ``figure``, ``value`` and ``unit``; when a floor was measured in the same
run it also carries ``floor``, ``ratio`` and, when the issue sets one, ``target`` and ``ok``.
``bench.run`` collects these lines and prints the summary table from those keys.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import os
import platform
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
OUT_DIR = BENCH_DIR / "out"
"""Where big stores and results live (gitignored)."""


def out_dir() -> Path:
    """``bench/out``, created when missing."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    return OUT_DIR


# -- timing -------------------------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``samples``, linear between closest ranks."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """p50 / p90 / p99 / max of per-operation times, in milliseconds."""
    return {
        "p50_ms": round(percentile(seconds, 50) * 1000, 4),
        "p90_ms": round(percentile(seconds, 90) * 1000, 4),
        "p99_ms": round(percentile(seconds, 99) * 1000, 4),
        "max_ms": round(max(seconds) * 1000, 4) if seconds else math.nan,
    }


def time_each(operation: Callable[[int], object], n: int) -> list[float]:
    """Call ``operation(i)`` for i in 0..n-1; return each call's wall time in seconds."""
    clock = time.perf_counter
    out: list[float] = []
    for i in range(n):
        start = clock()
        operation(i)
        out.append(clock() - start)
    return out


class Stopwatch:
    """Accumulates wall time and this thread's CPU time over several ``with`` blocks.

    CPU time (user + system, this thread only) is what a busy shared machine disturbs least;
    figures report it beside wall time.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self._start = 0.0
        self._cpu_start = 0.0

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        self._cpu_start = time.thread_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.perf_counter() - self._start
        self.cpu_seconds += time.thread_time() - self._cpu_start


# -- output -------------------------------------------------------------------------------------


def time_queries(fn: Callable[[str], object], queries: Sequence[str], rounds: int) -> list[float]:
    """Seconds per call of ``fn(query)``, every query ``rounds`` times over."""
    out: list[float] = []
    for _ in range(rounds):
        for q in queries:
            start = time.perf_counter()
            fn(q)
            out.append(time.perf_counter() - start)
    return out


def emit(bench: str, figure: str, **fields: Any) -> dict[str, Any]:
    """Print one JSON line for a figure (floats rounded, 1-minute load average added)."""
    record: dict[str, Any] = {"bench": bench, "figure": figure}
    for key, value in fields.items():
        record[key] = round(value, 4) if isinstance(value, float) else value
    record.setdefault("loadavg1", round(os.getloadavg()[0], 2))
    print(json.dumps(record, ensure_ascii=False), flush=True)
    return record


def ratio(engine: float, floor: float) -> float:
    """engine / floor, rounded (nan when the floor is zero)."""
    return round(engine / floor, 3) if floor else math.nan


def log(message: str) -> None:
    """Progress note on stderr (stdout stays machine-readable)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _git_commit() -> str:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=BENCH_DIR,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except OSError:
        return ""
    return result.stdout.strip()


def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    import apsw

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apswversion(),
        "commit": _git_commit(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


# -- synthetic text ------------------------------------------------------------------------------

_COMMON = (
    "the of and to a in is it you that for on with this be are as was not have but we can at "
    "by from or if will an so do all your my what there they which would one about more when "
    "up out just then also use should could like need into than only how now file function "
    "error message session agent model test run code value return call tool result output "
    "config change line data type name path list user time check build fix update add remove "
    "create write read server request response default option version issue problem example "
    "command search index token prompt context window summary branch resume export delete title "
    "workspace retry deploy refactor parse handle import module class method string number "
    "because after before during while where here still again already each every some other"
)
_IDENTIFIERS = (
    "chat-send", "P2.2", "snake_case_name", "getUserById", "HTTP_404", "v1.2.3", "utf-8",
    "session_id", "max_tokens", "tool_call_id", "x86_64", "gpt-4o", "py3.11", "README.md",
    "state.db", "src/main.py", "0x7fff", "k8s", "foo_bar_baz", "ERR_CONN_RESET",
)  # fmt: skip
_CJK = (
    "我们使用模型进行全文搜索，并且需要支持中文分词。",
    "这个会话的历史记录需要导出为文件。",
    "日本語のテキストを検索できるようにしてください。",
    "エラーが発生したので再試行します。",
    "한국어 검색엔진을 위한 토크나이저를 테스트합니다.",
    "세션을 다시 시작하고 결과를 확인하세요.",
)
_SYLLABLES = (
    "ka", "lo", "mi", "ren", "tor", "vel", "an", "dis", "pre", "ex", "ul", "sor", "ban", "qui",
    "zen", "tra", "mon", "el", "ri", "gon", "pha", "sti", "ver", "cal", "nu", "dra", "fen", "op",
)  # fmt: skip


class TextGen:
    """Seeded synthetic messages: Zipf-like word frequencies, identifiers, emails, URLs, CJK.

    The vocabulary is ~200 common English words followed by ``extra_words`` generated words;
    word ``r`` (0-based rank) is drawn with weight ``1 / (r + 2.7) ** 1.05`` (Zipf-Mandelbrot),
    so a few words are in most messages and most words are rare.
    """

    def __init__(self, seed: int = 1, *, extra_words: int = 30_000, cjk: float = 0.05) -> None:
        self.rng = random.Random(seed)
        vocab_rng = random.Random(12345)
        words = list(dict.fromkeys(_COMMON.split()))
        seen = set(words)
        target = len(words) + extra_words
        while len(words) < target:
            word = "".join(vocab_rng.choices(_SYLLABLES, k=vocab_rng.randint(2, 4)))
            if word not in seen:
                seen.add(word)
                words.append(word)
        self.words: list[str] = words
        weights = [1.0 / (r + 2.7) ** 1.05 for r in range(len(words))]
        self.cum_weights = list(itertools.accumulate(weights))
        self.cjk = cjk

    def rank_of(self, word: str) -> int:
        """The frequency rank of a vocabulary word (0 = most common), or -1."""
        try:
            return self.words.index(word)
        except ValueError:
            return -1

    def word_at_quantile(self, q: float) -> str:
        """The word at cumulative-frequency quantile ``q`` (0..1)."""
        total = self.cum_weights[-1]
        return self.words[min(bisect.bisect_left(self.cum_weights, q * total), len(self.words) - 1)]

    def _special(self) -> str:
        rng = self.rng
        kind = rng.random()
        if kind < 0.5:
            return rng.choice(_IDENTIFIERS)
        if kind < 0.75:
            return f"{rng.choice(self.words[200:2200])}{rng.randint(1, 99)}@example.com"
        return (
            f"https://docs.example.org/{rng.choice(self.words[200:5200])}?id={rng.randint(1, 9999)}"
        )

    def message(self, size: int = 300) -> str:
        """One message of about ``size`` UTF-8 bytes."""
        rng = self.rng
        n = max(1, size // 8)
        parts = rng.choices(self.words, cum_weights=self.cum_weights, k=n)
        for _ in range(rng.choice((0, 0, 0, 1, 1, 2))):
            parts.insert(rng.randrange(len(parts) + 1), self._special())
        if rng.random() < self.cjk:
            parts.insert(rng.randrange(len(parts) + 1), rng.choice(_CJK))
        text = " ".join(parts)
        while len(text) < size - 8:
            text += " " + rng.choices(self.words, cum_weights=self.cum_weights, k=1)[0]
        return text

    def messages(self, n: int, size: int = 300) -> Iterable[str]:
        """``n`` messages, lazily."""
        for _ in range(n):
            yield self.message(size)


@contextmanager
def postgres_url(url: str | None) -> Iterator[str]:
    """``url`` when given; otherwise a temporary PostgreSQL cluster's database, stopped after."""
    if url:
        yield url
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.pg_server import PgServer

    server = PgServer()
    log("starting a temporary PostgreSQL cluster")
    server.start()
    try:
        yield server.database()
    finally:
        server.stop()
