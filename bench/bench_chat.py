"""Chat benchmarks: resume of a long session to the first prompt, and one offline turn.

1. ``resume_to_prompt``: ``hermes -r ID`` on a pseudo-terminal for a session of ``--messages``
   messages (default 20,000), timed from spawn until the input prompt is shown with the recap
   panel drawn. The floor is ``hermes sessions list`` on the same store (the issue's target:
   at most 1.5x it); a bare interpreter start is reported too. Resume and list runs alternate
   (the machine may be shared and noisy) after one warm-up each; the figure is the median,
   the minimum is reported too. Child processes may write bytecode (``PYTHONDONTWRITEBYTECODE``
   is dropped), so both commands are timed with compiled modules as an installed hermes is.
2. ``offline_turn``: one offline chat turn end to end in process (prompt, append the user
   message, respond, append the turn atomically), median over ``--turns`` turns.

Run: ``python -m bench.bench_chat [--messages 20000] [--repeat 9] [--turns 200]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pexpect

from bench.common import emit, log, ratio
from hermes_es.commands.chat import Chat
from hermes_es.commands.engine import SessionEngine
from hermes_es.config import HermesConfig
from hermes_es.responders.offline import OfflineResponder

BENCH = "bench_chat"
ENTRY = "from hermes_es.cli import main; main()"


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "HERMES_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update({"HERMES_HOME": str(home), "COLUMNS": "160"})
    return env


def build_store(home: Path, messages: int) -> str:
    """One CLI session holding ``messages`` messages (user/assistant pairs, some tool turns)."""
    with SessionEngine.open(home) as engine:
        sid = engine.start_session("cli", title="long one", cwd=str(home))
        batch: list[dict[str, object]] = []
        for i in range(messages // 2):
            batch.append({"role": "user", "content": f"question {i} about the session store " * 3})
            batch.append({"role": "assistant", "content": f"answer {i}: " + "lorem ipsum " * 20})
            if len(batch) >= 1000:
                engine.append_turn(sid, batch)
                batch = []
        if batch:
            engine.append_turn(sid, batch)
    return sid


def time_resume(home: Path, sid: str) -> float:
    """Seconds from spawn to the first input prompt of ``hermes -r SID`` (recap drawn)."""
    start = time.perf_counter()
    child = pexpect.spawn(
        sys.executable,
        ["-c", ENTRY, "-r", sid],
        env=_env(home),
        cwd=str(home),
        encoding="utf-8",
        timeout=120,
        dimensions=(50, 160),
    )
    child.expect_exact("hermes> ")
    elapsed = time.perf_counter() - start
    if "Recap of" not in str(child.before):
        raise RuntimeError("recap panel was not drawn")
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    return elapsed


def time_command(home: Path, *args: str) -> float:
    """Seconds for one hermes subprocess run."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        env=_env(home),
        cwd=home,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - start


def time_bare() -> float:
    """Seconds for a bare interpreter start."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - start


def offline_turns(home: Path, turns: int) -> list[float]:
    """Per-turn seconds of in-process offline chat turns."""
    with SessionEngine.open(home) as engine:
        sid = engine.start_session("cli", cwd=str(home))
        chat = Chat(
            engine,
            sid,
            responder=OfflineResponder(),
            config=HermesConfig(),
            profile_dir=home,
            tools=["echo"],
            workspace=home,
        )
        chat.send("warm up")
        out: list[float] = []
        for i in range(turns):
            start = time.perf_counter()
            chat.send(f"message number {i}")
            out.append(time.perf_counter() - start)
    return out


def main() -> None:
    """Run both benchmarks and print JSON lines."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        log(f"building a {args.messages}-message session")
        sid = build_store(home, args.messages)
        time_resume(home, sid)  # warm the page cache and the bytecode caches
        time_command(home, "sessions", "list")
        resumes: list[float] = []
        listings: list[float] = []
        for _ in range(args.repeat):
            resumes.append(time_resume(home, sid))
            listings.append(time_command(home, "sessions", "list"))
        resume, listing = statistics.median(resumes), statistics.median(listings)
        bare = statistics.median(time_bare() for _ in range(args.repeat))
        emit(
            BENCH,
            "resume_to_prompt",
            value=resume * 1000,
            unit="ms",
            messages=args.messages,
            floor=listing * 1000,
            floor_name="hermes sessions list",
            ratio=ratio(resume, listing),
            target=1.5,
            ok=resume <= 1.5 * listing,
            stat="median",
            min_ms=round(min(resumes) * 1000, 1),
            floor_min_ms=round(min(listings) * 1000, 1),
            repeat=args.repeat,
            bare_interpreter_ms=round(bare * 1000, 1),
        )
    with tempfile.TemporaryDirectory() as tmp:
        samples = offline_turns(Path(tmp), args.turns)
        emit(
            BENCH,
            "offline_turn",
            value=statistics.median(samples) * 1000,
            unit="ms",
            p95=sorted(samples)[int(len(samples) * 0.95) - 1] * 1000,
            turns=args.turns,
        )


if __name__ == "__main__":
    main()
