"""``make demo``: drive the real ``hermes`` program in a throw-away HERMES_HOME and show the store.

Everything runs offline: the built-in deterministic responder answers, and the store is a real
``state.db`` (WAL, FTS5) under a temporary directory that is removed afterwards unless
``--keep`` is given. Every step is a real subprocess, exactly as a person would type it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

TITLE = "payments refactor"


class Demo:
    """Runs ``hermes`` commands against one temporary home and echoes them."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = dict(
            os.environ, HERMES_HOME=str(home), HERMES_RESPONDER="offline", COLUMNS="120"
        )
        self.env.pop("TMUX_PANE", None)

    def run(self, *args: str, show: bool = True, expect: int = 0) -> str:
        """Run ``hermes ARGS``; print the command and its output."""
        proc = subprocess.run(
            [sys.executable, "-c", "from hermes_es.cli import main; main()", *args],
            env=self.env,
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if show:
            click.secho("$ hermes " + " ".join(_quote(a) for a in args), fg="green")
            out = (proc.stdout + proc.stderr).rstrip()
            if out:
                click.echo(out)
        if proc.returncode != expect:
            raise click.ClickException(
                f"hermes {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}"
            )
        return proc.stdout


def _quote(arg: str) -> str:
    return f'"{arg}"' if (" " in arg or not arg) else arg


def _watch(home: Path, ref: str) -> Any:
    """A WebSocket client of the running gateway (a ticket from its control socket) attached
    to the session ``ref``: it hears that session's stream live."""
    from hermes_es.gateway.client import running_gateway

    handle = running_gateway(home)
    if handle is None:
        raise click.ClickException("the gateway the demo started is not running")
    conn = handle.connect("tui")
    conn.call("session.resume", {"ref": ref})
    return conn


def _seen(conn: Any) -> list[str]:
    """What the watching client received until the turn it saw admitted finished."""
    lines = []
    for message in conn.notifications(timeout=10):
        params = message.get("params") or {}
        if message.get("method") == "turn.stream":
            lines.append(f"turn.stream     {params['item']['type']} (live, not stored)")
            continue
        if message.get("method") != "session.event":
            continue
        lines.append(f"v{params['sequence']:<5} {params['type']}  by {params['actor']}")
        if params["type"] in ("hermes.turn.finished", "hermes.turn.unknown"):
            break
    conn.close()
    return lines


def _step(title: str) -> None:
    click.secho(f"\n▶ {title}", fg="cyan", bold=True)


@click.command()
@click.option("--keep", is_flag=True, help="Keep the temporary HERMES_HOME and print its path.")
def main(keep: bool) -> None:
    """Run the demo."""
    home = Path(tempfile.mkdtemp(prefix="hermes-demo-"))
    demo = Demo(home)
    try:
        click.secho(f"HERMES_HOME={home}  (offline responder, real state.db)", bold=True)
        _step("chat: every turn is one atomic append of events")
        demo.run("/new", TITLE, "--source", "cli", "-q", "Refactor chat-send for release P2.2")
        demo.run("-c", TITLE, "-q", "/tool word_count how many words are in this sentence")
        demo.run("-c", TITLE, "-q", "Mail ops@example.com the plan; note 支付重构 for Tokyo")
        demo.run("-z", "one-shot question about invoice INV-7f3a")
        demo.run("-c", TITLE, "-q", "/tool echo release checklist")

        _step("list and search (English, identifiers, emails, CJK)")
        demo.run("sessions", "list")
        for query in ("chat-send", "ops@example.com", "支付"):
            demo.run("sessions", "search", query, "--limit", "2")

        _step("audit replay and the transcript as it stood at version 3")
        demo.run("sessions", "history", TITLE)
        demo.run("sessions", "show", TITLE, "--as-of", "3")

        _step("export the displayed history, then a verified delete of the one-shot run")
        demo.run("sessions", "export", str(home / "md"), "--format", "md", "--session-id", TITLE)
        click.echo((home / "md" / "manifest.jsonl").read_text().rstrip())
        oneshot = demo.run("sessions", "list", "--source", "oneshot", "--json", show=False)
        import json

        oneshot_id = json.loads(oneshot)[0]["id"]
        demo.run(
            "sessions", "export", str(home / "backup"), "--session-id", oneshot_id,
            "--delete-after-verified", "--yes",
        )  # fmt: skip
        demo.run("sessions", "history", oneshot_id)
        traces = [f.name for f in home.glob("state.db*") if b"INV-7f3a" in f.read_bytes()]
        click.echo(f"bytes of 'INV-7f3a' left in state.db and its WAL: {traces or 'none'}")

        _step("the gateway: one owner of every session; the CLI attaches with a ticket")
        demo.run("gateway", "start")
        demo.run("gateway", "status")
        watcher = _watch(home, TITLE)
        demo.run("-c", TITLE, "-q", "Summarize where we are, through the gateway")
        click.secho("a second client (a WebSocket, kind tui) attached to the same session saw:")
        for line in _seen(watcher):
            click.echo(f"  {line}")
        history = demo.run("sessions", "history", TITLE, show=False).rstrip().splitlines()
        click.secho(f"$ hermes sessions history {_quote(TITLE)}  (last 6 events)", fg="green")
        click.echo("\n".join(history[-6:]))
        demo.run("sessions", "optimize", expect=1)  # the gateway holds state.db
        demo.run("gateway", "stop")

        _step("projections rebuilt from the log match the live ones; the store is healthy")
        demo.run("sessions", "verify", "--quiet")
        demo.run("doctor")
        db = home / "state.db"
        click.secho(f"\nstate.db: {db.stat().st_size:,} bytes", bold=True)
    finally:
        if keep:
            click.echo(f"kept {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
