"""``make demo``: record a few conversations in a throw-away HERMES_HOME and show what was stored.

Everything runs offline: the built-in deterministic responder answers, and the store is a real
``state.db`` (WAL, FTS5) under a temporary directory that is removed afterwards unless
``--keep`` is given.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click


def _hermes(home: Path, *args: str, stdin: str | None = None) -> str:
    env = dict(os.environ, HERMES_HOME=str(home), HERMES_RESPONDER="offline", COLUMNS="110")
    proc = subprocess.run(
        [sys.executable, "-c", "from hermes_es.cli import main; main()", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise click.ClickException(f"hermes {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout


def _step(title: str) -> None:
    click.secho(f"\n▶ {title}", fg="cyan", bold=True)


@click.command()
@click.option("--keep", is_flag=True, help="Keep the temporary HERMES_HOME and print its path.")
def main(keep: bool) -> None:
    """Run the demo."""
    from hermes_es import SessionEngine
    from hermes_es.responders.base import ChatMessage
    from hermes_es.responders.offline import OfflineResponder

    home = Path(tempfile.mkdtemp(prefix="hermes-demo-"))
    try:
        click.secho(f"HERMES_HOME={home} (offline responder)", bold=True)
        responder = OfflineResponder()
        _step("record a conversation: every turn is one atomic append of events")
        with SessionEngine.open(home, actor="demo") as engine:
            sid = engine.start_session(
                "cli", title="payments refactor", system_prompt="You are Hermes.", cwd=str(home)
            )
            for text in (
                "Let's refactor the chat-send handler for release P2.2",
                "/tool word_count how many words are in this sentence",
                "Mail ops@example.com the plan, and note 支付重构 for the Tokyo team",
            ):
                history = [ChatMessage(role="user", content=text)]
                result = responder.respond("You are Hermes.", history, model="hermes-offline")
                turn = [{"role": "user", "content": text}]
                for m in result.messages:
                    turn.append(
                        {
                            "role": m.role,
                            "content": m.content,
                            "tool_calls": [
                                {"id": c.id, "name": c.name, "arguments": c.arguments}
                                for c in m.tool_calls
                            ],
                            "tool_call_id": m.tool_call_id,
                            "tool_name": m.name if m.role == "tool" else None,
                        }
                    )
                seqs = engine.append_turn(sid, turn)
                click.echo(f"  turn of {len(seqs)} messages stored as seq {seqs[0]}..{seqs[-1]}")
            for query in ("chat-send", "P2.2", "ops@example.com", "支付"):
                hits = engine.search(query)
                click.echo(f"  search {query!r}: {len(hits)} hit(s)")
            engine.rewind_turns(sid, 1)
            hits = engine.search("支付")
            click.echo(f"  rewound the last turn (rows kept, inactive; search '支付' now: {len(hits)})")
            child = engine.continue_session(
                sid, [{"role": "system", "content": responder.summarize([])}]
            )
            click.echo(f"  compression split → continuation {child} ('payments refactor #2')")
            other = engine.start_session("oneshot", cwd=str(home))
            engine.append_message(other, "user", "one-shot question about invoices")
        _step("audit replay: hermes sessions history 'payments refactor'")
        click.echo(_hermes(home, "sessions", "history", sid).rstrip())
        _step("transcript as it stood at version 3: hermes sessions show ID --as-of 3")
        click.echo(_hermes(home, "sessions", "show", sid, "--as-of", "3").rstrip())
        _step("projections rebuilt from the log match the live ones: hermes sessions verify")
        click.echo(_hermes(home, "sessions", "verify", "--quiet").rstrip())
        db = home / "state.db"
        click.secho(f"\nstate.db: {db.stat().st_size:,} bytes", bold=True)
    finally:
        if keep:
            click.echo(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
