"""What the commands share: the ``--config`` option, a group that turns the project's errors
into a one-line message, and a console for wide tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from reranker.core.errors import RerankerError

if TYPE_CHECKING:
    from rich.console import Console


CONFIG_HELP = ("YAML config file (see config/default.yaml). Relative paths in it resolve "
               "against its folder. Without it, the defaults apply in the current folder.")


class CommandGroup(click.Group):
    """Turns the project's errors into a one-line message and exit status 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except RerankerError as exc:
            raise click.ClickException(exc.message) from exc


def config_option(func):
    return click.option("--config", "-c", "config_path", type=click.Path(dir_okay=False),
                        default=None, help=CONFIG_HELP)(func)


def wide_console() -> Console:
    """A console that keeps table columns whole: piped, as wide as the tables are; in a
    terminal, at least 160 columns wide."""
    from rich.console import Console

    console = Console()
    return Console(width=max(console.width, 160) if console.is_terminal else 1000)


def window_options(func):
    """``--days`` (None: every page the store keeps) and ``--arm`` (None: every page), for
    the commands that read logged pages."""
    func = click.option("--arm", "arm", metavar="LABEL", default=None,
                        help="Only the pages this arm showed alone (default: every "
                             "page).")(func)
    return click.option("--days", type=click.FloatRange(min=0, min_open=True), default=None,
                        help="Only the pages logged in the last DAYS days (default: every "
                             "page the store keeps).")(func)
