"""The ``hermes`` command: the root group and the ``sessions`` group.

Subcommands are registered by name and imported only when used, so ``hermes sessions list``
does not pay for the chat loop or the write path.
"""

from __future__ import annotations

from typing import Any

import click

from hermes_es.cli.base import LazyGroup
from hermes_es.cli.root import RootGroup, chat_options

SESSIONS_COMMANDS = {
    # core: audit and maintenance
    "history": "hermes_es.cli.sessions_audit:history_cmd",
    "show": "hermes_es.cli.sessions_audit:show_cmd",
    "rebuild-projections": "hermes_es.cli.sessions_maint:rebuild_cmd",
    "verify": "hermes_es.cli.sessions_maint:verify_cmd",
    "copy-store": "hermes_es.cli.sessions_copy:copy_store_cmd",
    # list, search, curate, prune, archive, optimize
    "list": "hermes_es.cli.sessions_list:list_cmd",
    "search": "hermes_es.cli.sessions_list:search_cmd",
    "stats": "hermes_es.cli.sessions_list:stats_cmd",
    "rename": "hermes_es.cli.sessions_curate:rename_cmd",
    "pin": "hermes_es.cli.sessions_curate:pin_cmd",
    "unpin": "hermes_es.cli.sessions_curate:unpin_cmd",
    "archive": "hermes_es.cli.sessions_curate:archive_cmd",
    "unarchive": "hermes_es.cli.sessions_curate:unarchive_cmd",
    "delete": "hermes_es.cli.sessions_curate:delete_cmd",
    "prune": "hermes_es.cli.sessions_prune:prune_cmd",
    "optimize": "hermes_es.cli.sessions_prune:optimize_cmd",
    # export, import, migration
    "export": "hermes_es.cli.sessions_export:export_cmd",
    "import": "hermes_es.cli.sessions_export:import_cmd",
    # stored prompts
    "refresh-prompts": "hermes_es.cli.sessions_prompts:refresh_prompts_cmd",
    "repair-prompts": "hermes_es.cli.sessions_prompts:repair_prompts_cmd",
    # turns a gateway left unknown
    "resolve": "hermes_es.cli.sessions_turns:resolve_cmd",
}

ROOT_COMMANDS = {
    "chat": "hermes_es.cli.chat:chat_cmd",
    "doctor": "hermes_es.cli.doctor:doctor_cmd",
    "gateway": "hermes_es.cli.gateway:gateway_group",
}


@click.group(cls=RootGroup, lazy=ROOT_COMMANDS, invoke_without_command=True)
@click.option("-p", "--profile", default=None, help="Profile name (default: the default profile).")
@click.option(
    "--store",
    "store",
    default=None,
    metavar="URL",
    help="Session store: a postgresql:// URL or a state.db path"
    " (default: $HERMES_STORE_URL, config.yaml store.url, else the profile's state.db).",
)
@chat_options
@click.version_option(package_name="hermes_es", prog_name="hermes")
@click.pass_context
def cli(ctx: click.Context, /, profile: str | None, store: str | None, **chat: Any) -> None:
    """hermes: an AI agent whose every conversation is recorded as events.

    With no subcommand, chat: interactively on a terminal, or once with -q/-z/-Q.

    Example: hermes sessions list --limit 5
    """
    if ctx.invoked_subcommand is None:
        from hermes_es.cli.chat import run_from_options

        run_from_options(ctx, chat)


@cli.group("sessions", cls=LazyGroup, lazy=SESSIONS_COMMANDS)
def sessions() -> None:
    """List, search, show, curate, export and maintain recorded sessions.

    Example: hermes sessions history latest
    """
