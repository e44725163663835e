"""Terminal output helpers shared by the commands."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import IO

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


@contextlib.contextmanager
def progress_bar(label: str, total: int | None = None, console: Console | None = None
                 ) -> Iterator[Callable[[int], None]]:
    """A progress bar on standard error (silent when it is not a terminal); yields
    ``advance(k)``."""
    console = console or Console(stderr=True)
    columns = [TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    if total:
        columns.append(TimeRemainingColumn())
    disable = not console.is_terminal
    with Progress(*columns, console=console, transient=True, disable=disable) as progress:
        task = progress.add_task(label, total=total)
        yield lambda k=1: progress.advance(task, k)


@contextlib.contextmanager
def output_file(path: str | None) -> Iterator[IO[str]]:
    """Standard output, or the file at ``path`` (a file that cannot be written: a message
    naming it)."""
    if path is None:
        yield sys.stdout
        return
    try:
        handle = open(path, "w", encoding="utf-8", newline="")  # noqa: SIM115 -- closed below
    except OSError as exc:
        raise click.BadParameter(f"{path} cannot be written: {exc.strerror or exc}",
                                 param_hint="--out") from None
    with handle:
        yield handle
