"""hermes_es: an event-sourced session engine for an AI agent.

``SessionEngine.open(home_or_db)`` is the public entry point; it is imported lazily so that
read-only commands start without loading the write path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from hermes_es.commands.engine import SessionEngine

__all__ = ["SessionEngine", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "SessionEngine":
        from hermes_es.commands.engine import SessionEngine

        return SessionEngine
    raise AttributeError(name)
