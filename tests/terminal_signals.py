"""Children on a pseudo-terminal get the signal dispositions of a terminal session.

A shell that starts a job in the background without job control (``cmd &`` in a script, CI
runners) sets SIGINT and SIGQUIT to "ignore", and an ignored signal stays ignored across exec:
Python then never installs its Ctrl-C handler, and a test pressing Ctrl-C tests nothing. A
user's terminal delivers them with their default disposition; this restores it in the child.
"""

from __future__ import annotations

import signal


def default_terminal_signals() -> None:
    """``preexec_fn`` for pexpect/subprocess: SIGINT and SIGQUIT back to their defaults."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
