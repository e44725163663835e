"""The ``reranker`` command line: the group, with one module per command or group of commands."""

from __future__ import annotations

import click

from reranker import __version__
from reranker.commands.analytics import analytics
from reranker.commands.evaluate import evaluate
from reranker.commands.experiments import promote, report
from reranker.commands.index import index
from reranker.commands.judgments import judgments
from reranker.commands.learners import learners
from reranker.commands.models import models
from reranker.commands.offline import demo, simulate
from reranker.commands.options import CommandGroup
from reranker.commands.rules import rules
from reranker.commands.serve import serve
from reranker.commands.train import prune, train
from reranker.commands.ubi import ubi


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="reranker")
def cli() -> None:
    """Online learning-to-rank from clicks, on top of a search engine.

    Index documents, serve ranked search results over HTTP, log clicks, and let a learner
    plugin improve the ranking from them.
    """


cli.add_command(index)
cli.add_command(serve)
cli.add_command(train)
cli.add_command(prune)
cli.add_command(report)
cli.add_command(promote)
cli.add_command(analytics)
cli.add_command(judgments)
cli.add_command(ubi)
cli.add_command(evaluate)
cli.add_command(learners)
cli.add_command(demo)
cli.add_command(simulate)
cli.add_command(models)
cli.add_command(rules)


def main() -> None:
    cli(prog_name="reranker")


if __name__ == "__main__":  # pragma: no cover
    main()
