"""Progress bars for long work (rebuild, verify, import, export, prune), drawn on stderr."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress_bar(label: str, *, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    """Yield a ``(done, total)`` callback that draws a rich progress bar on stderr."""
    if not enabled:
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    console = Console(stderr=True)
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
