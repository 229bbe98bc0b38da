"""Every registered command imports, answers --help with exit 0, and shows an example."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from hermes_es.cli.app import ROOT_COMMANDS, SESSIONS_COMMANDS, cli

COMMANDS = [[name] for name in ROOT_COMMANDS] + [["sessions", n] for n in SESSIONS_COMMANDS]


@pytest.mark.parametrize(
    "path", [[], ["sessions"], *COMMANDS], ids=lambda p: " ".join(p) or "hermes"
)
def test_help_has_an_example(path: list[str]) -> None:
    """`hermes … --help` exits 0 and its text carries an `Example:` line."""
    result = CliRunner().invoke(cli, [*path, "--help"], prog_name="hermes")
    assert result.exit_code == 0, result.output
    assert "Example:" in result.output, f"hermes {' '.join(path)} --help has no example"


def test_every_registered_command_resolves() -> None:
    """Each lazy registry entry names a module and attribute that exist (none silently missing)."""
    runner = CliRunner()
    listed = runner.invoke(cli, ["sessions", "--help"], prog_name="hermes").output
    for name in SESSIONS_COMMANDS:
        assert f"  {name}" in listed, name
    listed = runner.invoke(cli, ["--help"], prog_name="hermes").output
    for name in ROOT_COMMANDS:
        assert f"  {name}" in listed, name
