"""Teardown shared by the command tests: engines opened through ``open_engine`` are closed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

try:  # --import-mode=importlib imports this file by its dotted path under the repository root
    from tests.commands.export_helpers import close_opened_engines
except ModuleNotFoundError:  # pragma: no cover
    from export_helpers import close_opened_engines  # type: ignore[no-redef,import-not-found]


@pytest.fixture(autouse=True)
def _close_opened_engines() -> Iterator[None]:
    """After each test, close the engines (and their SQLite files) ``open_engine`` returned."""
    yield
    close_opened_engines()
