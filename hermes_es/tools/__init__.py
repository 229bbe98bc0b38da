"""The built-in tool registry the chat's tool loop runs (read-only, scoped to the workspace)."""

from hermes_es.tools.registry import (
    REGISTRY,
    Tool,
    ToolContext,
    ToolError,
    ToolOutcome,
    definitions,
    run_tool,
)

__all__ = [
    "REGISTRY",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutcome",
    "definitions",
    "run_tool",
]
