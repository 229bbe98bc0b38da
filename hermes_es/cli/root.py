"""The root ``hermes`` group: chat options at the top level and ``hermes /new NAME`` routing.

Kept light (click only) so ``hermes sessions list`` stays fast: the chat code is imported only
when a chat actually runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from hermes_es.cli.base import LazyGroup

F = TypeVar("F", bound=Callable[..., Any])

# Root options that take a value: a following token starting with "/" is that value, not a
# slash command (``hermes --in /tmp/x``).
_VALUE_OPTIONS = frozenset(
    {
        "-p",
        "--profile",
        "--store",
        "-q",
        "--query",
        "-z",
        "-r",
        "--resume",
        "--in",
        "-m",
        "--model",
        "--source",
    }
)
_SLASH_OPTION = "--slash"


def chat_options(func: F) -> F:
    """The chat options shared by ``hermes`` and ``hermes chat``."""
    options = [
        click.option("-q", "--query", default=None, help="Send one message and print the reply."),
        click.option("-z", "oneshot_text", default=None, help="One-shot: print only the reply."),
        click.option("-Q", "--quiet", is_flag=True, help="Quiet one-shot: print only the reply."),
        click.option("--oneshot", is_flag=True, help="Record the run as a one-shot session."),
        click.option(
            "-c",
            "--continue",
            "continue_",
            is_flag=False,
            flag_value="",
            default=None,
            metavar="[NAME]",
            help="Continue this terminal's last session, or the session named NAME.",
        ),
        click.option(
            "-r",
            "--resume",
            default=None,
            metavar="REF",
            help="Resume by id, prefix, title or 'latest'.",
        ),
        click.option(
            "--in",
            "in_dir",
            default=None,
            metavar="DIR",
            help="Change into DIR first; pick its latest session.",
        ),
        click.option(
            "--no-restore-cwd", is_flag=True, help="Stay in the current directory on resume."
        ),
        click.option("-m", "--model", default=None, help="Model for a new session."),
        click.option("--source", default=None, help="Source tag recorded on the session."),
        click.option(
            "--take-over", is_flag=True, help="Take over a session another live chat holds."
        ),
        click.option(
            "--fork", is_flag=True, help="Fork a branch of a session another live chat holds."
        ),
        click.option("--read-only", is_flag=True, help="Attach read-only to a held session."),
        click.option(_SLASH_OPTION, "slash", default=None, hidden=True),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _slash_index(args: list[str]) -> int | None:
    """Index of the first token that is a slash command, not an option value."""
    for index, token in enumerate(args):
        if token == "--":
            return None
        if token.startswith("/") and len(token) > 1 and token[1:2].isalpha():
            previous = args[index - 1] if index else ""
            if previous in _VALUE_OPTIONS:
                continue
            return index
        if not token.startswith("-") and (not index or args[index - 1] not in _VALUE_OPTIONS):
            return None  # a subcommand name comes first
    return None


class RootGroup(LazyGroup):
    """``hermes``: subcommands, or a chat when none is given (``hermes /new NAME`` included)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Turn ``/cmd rest…`` into the hidden ``--slash '/cmd rest…'`` option."""
        index = _slash_index(args)
        if index is not None:
            # ``/cmd`` takes the words after it up to the next option, so
            # ``hermes /new payments refactor -q "first message"`` names the session and sends.
            end = index + 1
            while end < len(args) and not (args[end].startswith("-") and len(args[end]) > 1):
                end += 1
            slash = " ".join(args[index:end])
            args = [*args[:index], *args[end:], _SLASH_OPTION, slash]
        return super().parse_args(ctx, args)
