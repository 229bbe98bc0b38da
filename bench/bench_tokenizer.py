"""Micro-benchmark: FTS5 index build speed with ``unicode61`` versus the ``hermes`` tokenizer.

Builds the same external-content FTS5 index over N synthetic ~300-byte messages (5% holding
CJK text) once per tokenizer, in one ``INSERT … SELECT`` transaction each, on a real file, and
prints JSON: rows/s for each tokenizer and their ratio (the ``unicode61`` run is the floor).
A third build uses a Python tokenizer that only forwards ``unicode61``'s output: the cost any
Python-level tokenizer pays. ``hermes`` is the tokenizer the store registers (the compiled one
when it is built, ``tokenizer`` in the output says which); ``hermes_py`` is the Python one (the
reference), so the two builds are compared in the same run.

Each build runs ``--repeat`` times, interleaved, and the fastest is kept (CPU time of this
process, and wall time), to damp a busy machine. ``*_row_insert_cpu_us``: the CPU time a row of
indexing the first 20,000 messages one ``INSERT`` a row, 25 rows a transaction, into a table
made as ``messages_fts`` is (what a live append pays; the floor is ``unicode61``'s).

Run: ``python -m bench.bench_tokenizer [--n 200000] [--cjk 0.05] [--seed 1] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import apsw

from hermes_es.projections.fts import (
    BASE_ARGS,
    BASE_TOKENIZER,
    register_python_tokenizer,
    register_tokenizer,
    tokenizer_build,
)

_VOCABULARY = (
    "the session agent message search index tool call result error retry branch resume export "
    "delete title workspace model token prompt context window compress summary chat-send P2.2 "
    "snake_case_name user@example.com https://example.org/docs?q=1 refactor test build deploy "
    "config value because would should could which there their about after before during"
)
WORDS = tuple(_VOCABULARY.split())

CJK_SENTENCES = (
    "我们使用模型进行全文搜索，并且需要支持中文分词。",
    "日本語のテキストを検索できるようにしてください。",
    "한국어 검색엔진을 위한 토크나이저를 테스트합니다.",
)


def make_message(rng: random.Random, cjk_fraction: float, size: int = 300) -> str:
    """One synthetic message of about ``size`` UTF-8 bytes."""
    parts: list[str] = []
    length = 0
    if rng.random() < cjk_fraction:
        sentence = rng.choice(CJK_SENTENCES)
        parts.append(sentence)
        length += len(sentence.encode("utf-8")) + 1
    while length < size:
        word = rng.choice(WORDS)
        parts.append(word)
        length += len(word) + 1
    rng.shuffle(parts)
    return " ".join(parts)


def _passthrough_factory(connection: apsw.Connection, args: list[str]) -> apsw.Tokenizer:
    """A Python tokenizer that returns ``unicode61``'s tokens unchanged."""
    base = connection.fts5_tokenizer(BASE_TOKENIZER, [*BASE_ARGS, *args])

    def tokenize(utf8: bytes, flags: int, locale: str | None) -> apsw.TokenizerResult:
        return base(utf8, flags, locale)

    return tokenize


def load_messages(conn: apsw.Connection, n: int, cjk_fraction: float, seed: int) -> None:
    """Create and fill the ``messages`` table (not timed)."""
    rng = random.Random(seed)
    conn.execute("CREATE TABLE messages(id INTEGER PRIMARY KEY, content TEXT NOT NULL)")
    with conn:
        conn.executemany(
            "INSERT INTO messages(content) VALUES(?)",
            ((make_message(rng, cjk_fraction),) for _ in range(n)),
        )


TOKENIZERS = {
    "unicode61": "unicode61 remove_diacritics 2",
    "hermes": "hermes",
    "hermes_py": "hermes_py",
    "passthrough": "passthrough",
}


def time_build(conn: apsw.Connection, table: str, tokenize: str) -> tuple[float, float]:
    """Create an FTS table with ``tokenize``, time indexing every message into it (wall and CPU
    seconds), drop it."""
    conn.execute(
        f"CREATE VIRTUAL TABLE {table} USING fts5(content, content='messages', "
        f"content_rowid='id', tokenize='{tokenize}')"
    )
    start, cpu = time.perf_counter(), time.process_time()
    with conn:
        conn.execute(f"INSERT INTO {table}(rowid, content) SELECT id, content FROM messages")
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    conn.execute(f"DROP TABLE {table}")
    return elapsed, cpu


ROW_GROUP = 25
"""Rows a transaction in ``time_rows`` (the gateway writer's groups are about that size)."""


def time_rows(conn: apsw.Connection, table: str, tokenize: str, rows: int) -> float:
    """CPU seconds a row of indexing the first ``rows`` messages one ``INSERT`` each, in
    transactions of ``ROW_GROUP`` (as live appends index them), into a fresh FTS table made as
    the store makes ``messages_fts`` (prefix index, secure-delete)."""
    conn.execute(
        f"CREATE VIRTUAL TABLE {table} USING fts5(content, content='messages', "
        f"content_rowid='id', tokenize='{tokenize}', prefix='3');"
        f"INSERT INTO {table}({table}, rank) VALUES('secure-delete', 1)"
    )
    texts = conn.execute("SELECT id, content FROM messages LIMIT ?", (rows,)).fetchall()
    sql = f"INSERT INTO {table}(rowid, content) VALUES(?, ?)"
    cpu = time.process_time()
    for at in range(0, len(texts), ROW_GROUP):
        with conn:
            for row in texts[at : at + ROW_GROUP]:
                conn.execute(sql, row)
    cpu = time.process_time() - cpu
    conn.execute(f"DROP TABLE {table}")
    return cpu / len(texts)


def run(n: int, cjk_fraction: float, seed: int, repeat: int) -> dict[str, object]:
    """Build with each tokenizer ``repeat`` times (interleaved); report the best of each."""
    best = dict.fromkeys(TOKENIZERS, float("inf"))
    best_cpu = dict.fromkeys(TOKENIZERS, float("inf"))
    tokens = 0
    with tempfile.TemporaryDirectory() as tmp:
        conn = apsw.Connection(str(Path(tmp) / "bench.db"))
        conn.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL")
        register_tokenizer(conn)
        register_python_tokenizer(conn, "hermes_py")
        conn.register_fts5_tokenizer("passthrough", _passthrough_factory)
        load_messages(conn, n, cjk_fraction, seed)
        tokenize = conn.fts5_tokenizer("hermes")
        for (text,) in conn.execute("SELECT content FROM messages"):
            tokens += len(tokenize(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None))
        per_row = dict.fromkeys(TOKENIZERS, float("inf"))
        for _ in range(repeat):
            for name, spec in TOKENIZERS.items():
                wall, cpu = time_build(conn, f"fts_{name}", spec)
                best[name] = min(best[name], wall)
                best_cpu[name] = min(best_cpu[name], cpu)
                row_cpu = time_rows(conn, f"fts_{name}", spec, min(n, 20_000))
                per_row[name] = min(per_row[name], row_cpu)
        conn.close()
    plain, hermes = best_cpu["unicode61"], best_cpu["hermes"]
    out: dict[str, object] = {
        "n": n,
        "cjk_fraction": cjk_fraction,
        "repeat": repeat,
        "tokenizer": tokenizer_build(),
        "tokens": tokens,
        "load": round(os.getloadavg()[0], 2),
    }
    for name in TOKENIZERS:
        out[f"{name}_s"] = round(best[name], 3)
        out[f"{name}_cpu_s"] = round(best_cpu[name], 3)
        out[f"{name}_rows_per_cpu_s"] = round(n / best_cpu[name])
        out[f"{name}_tokens_per_cpu_s"] = round(tokens / best_cpu[name])
        out[f"{name}_row_insert_cpu_us"] = round(per_row[name] * 1e6, 1)
    out["hermes_over_unicode61_cpu"] = round(plain / hermes, 3)
    out["hermes_py_over_unicode61_cpu"] = round(plain / best_cpu["hermes_py"], 3)
    out["hermes_over_hermes_py_cpu"] = round(best_cpu["hermes_py"] / hermes, 3)
    out["hermes_over_passthrough_cpu"] = round(best_cpu["passthrough"] / hermes, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the benchmark, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=200_000, help="messages to index")
    parser.add_argument("--cjk", type=float, default=0.05, help="fraction holding CJK text")
    parser.add_argument("--seed", type=int, default=1, help="random seed for the messages")
    parser.add_argument("--repeat", type=int, default=3, help="builds per tokenizer (best kept)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.n, args.cjk, args.seed, args.repeat), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
