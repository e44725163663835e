"""``reranker demo`` and ``reranker simulate``: learning without a live site (their work is
in :mod:`.demo` and :mod:`.simulate`, imported when they run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from reranker.offline.users import USER_HELP


@click.command()
@click.option("--dir", "workdir", type=click.Path(file_okay=False), default="reranker-demo",
              show_default=True, help="Folder for the demo's corpus, index, events and plot.")
@click.option("--searches", type=click.IntRange(min=50), default=1500, show_default=True,
              help="Searches the simulated users make.")
@click.option("--seed", type=int, default=7, show_default=True,
              help="Seed of the generated corpus and of the simulated users.")
@click.option("--learner", default="preference_perceptron", show_default=True,
              help="Learner to demonstrate.")
def demo(workdir: str, searches: int, seed: int, learner: str) -> None:
    """Watch the service learn: generate a corpus, index it, serve it over HTTP, and let
    simulated users search and click; print and plot the ranking quality as clicks arrive."""
    from reranker.commands.demo import run_demo

    run_demo(Path(workdir), searches=searches, seed=seed, learner=learner)


class _GreedyCommand(click.Command):
    """Lets ``--train S1 S2 S3`` mean ``--train S1 --train S2 --train S3`` for the options in
    ``greedy``: every following value up to the next option belongs to it."""

    greedy = ("--train", "--learner")

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rewritten, current = [], None
        for arg in args:
            if arg.startswith("-"):
                current = arg if arg in self.greedy else None
                rewritten.append(arg)
            elif current is not None and rewritten[-1] != current:
                rewritten.extend([current, arg])
            else:
                rewritten.append(arg)
        return super().parse_args(ctx, rewritten)


@click.command(cls=_GreedyCommand)
@click.option("--train", "train", multiple=True, metavar="FILE [FILE ...]",
              help="LETOR/SVMlight files whose queries form the interaction stream "
                   "(gzip or plain; files without qid need a .query file beside them).")
@click.option("--test", "test", metavar="FILE",
              help="LETOR file of held-out queries for offline NDCG@10 (required, here or "
                   "as 'test' in --config).")
@click.option("--learner", "learners", multiple=True, metavar="NAME [NAME ...]",
              help="Learners to simulate (`reranker learners` lists them); random and "
                   "backend_order are always added as floors.")
@click.option("--param", "params", multiple=True, metavar="LEARNER.KEY=VALUE",
              help="A learner parameter, e.g. batch_preference_perceptron.batch_size=10.")
@click.option("--click-model", metavar="MODEL",
              help="Simulated user [default: informational]: " + USER_HELP + ".")
@click.option("--impressions", type=click.IntRange(min=1), help="Impressions per run "
              "[default: 10000].")
@click.option("--runs", type=click.IntRange(min=1), help="Runs per learner, each with its own "
              "shuffled query stream [default: 5].")
@click.option("--seed", type=int, help="Seed; the same seed gives the same numbers "
              "[default: 0].")
@click.option("--out", type=click.Path(file_okay=False), help="Output folder for results.csv, "
              "summary.json and the plots [default: simulation].")
@click.option("--depth", type=click.IntRange(min=1), help="Depth of the learners' joint "
              "feature map [default: 5 with the coactive users, whose utility is DCG@5-style; "
              "10 with click models].")
@click.option("--discount", type=click.Choice(["log2", "reciprocal", "none"]),
              help="Discount of the learners' joint feature map [default: log2].")
@click.option("--gain", type=click.Choice(["linear", "exp"]), help="Gain of DCG* regret: "
              "linear (the coactive papers) or exp (2^r - 1) [default: linear].")
@click.option("--backend-feature", metavar="NAME|best", help="Feature whose order stands in "
              "for the backend's (e.g. 25 or f25, BM25 of the whole document in LETOR 4.0); "
              "'best' picks the best single feature on the training data [default: best].")
@click.option("--checkpoints", type=click.IntRange(min=2), help="Log-spaced checkpoints per "
              "run [default: 40].")
@click.option("--workers", type=click.IntRange(min=1), help="Parallel processes [default: one "
              "per core].")
@click.option("--library", type=click.Choice(["fixed", "growing"]), help="fixed: every query "
              "from the start; growing: queries and their documents appear over time in file "
              "order, as in Delage's growing library [default: fixed].")
@click.option("--reveal", type=click.FloatRange(min=0, max=1, min_open=True), help="Growing "
              "library: share of the impressions after which all queries are available "
              "[default: 0.5].")
@click.option("--start", type=click.Choice(["engine", "zero"]), help="The learners' first "
              "model: engine (the backend feature's order, as the service starts from the "
              "search engine's) or zero (w = 0, the papers' protocol, a random ranking) "
              "[default: engine].")
@click.option("--click-features/--no-click-features", default=None, help="Give the learners "
              "the click features, counted from the simulated users' clicks on the training "
              "queries (which repeat) [default: on, as in the service].")
@click.option("--specialize/--no-specialize", default=None, help="Keep the general model "
              "and each query's own clicks apart, as the service does (learner.specialize): "
              "the learners never see click_lift:query_doc, a query whose clicks judge a "
              "result gets its page refined by its click lift, and its clicks teach the "
              "learner the judged pairs at the learner's own ranking; --no-specialize: the "
              "learners see both click features (earlier versions) [default: on].")
@click.option("--confidence", type=click.FloatRange(min=0.5, max=0.999), help="Confidence at "
              "which a query's clicks judge a result (learner.confidence), where each run's "
              "evidence gate starts [default: 0.95].")
@click.option("--shrink/--no-shrink", default=None, help="Rank with each learned weight "
              "shrunk to the share the queries that taught it agree on, as the service does "
              "(learner.shrink) [default: on].")
@click.option("--query-balance/--no-query-balance", default=None, help="Learn from each "
              "query's pages as if the queries came equally often, as the service does "
              "(learner.query_balance) [default: on].")
@click.option("--takeover/--no-takeover", default=None, help="An experiment: the learners' "
              "pages serve alone only once duels (randomised pairs that the learner's order "
              "and the engine's rank the other way round, on queries without clicks of their "
              "own) show, at --confidence, that users prefer the learner; until then those "
              "queries get the two orders interleaved. Reports when each run's learner took "
              "over (docs/algorithms.md, \"Taking over from the engine, tried\") "
              "[default: off].")
@click.option("--window", type=click.IntRange(min=1), help="Impressions per window of online "
              "NDCG@10 for the worst-window report [default: 200].")
@click.option("--reward", type=click.Choice(["none", "dcg"]), help="The reward the "
              "simulated application reports per page, as POST /reward does in the service: "
              "dcg weighs each click by 1 / log2(rank + 1) (for learners such as eels) "
              "[default: none].")
@click.option("--evaluate", metavar="LEARNER", help="Off-policy check: estimate this "
              "learner's clicks@10 (its initial model, with its --param values) from every "
              "simulated learner's logged pages, and compare with its true on-policy value on "
              "the same queries (slower: each page's position probabilities are computed).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="YAML simulation plan with any of the options above as keys (train, test, "
                   "learners, params, click_model, ...); options given here win.")
def simulate(**options) -> None:
    """Replay labelled learning-to-rank data through learners with simulated users.

    Writes OUT/results.csv (one row per learner, run and checkpoint), OUT/windows.csv (the
    online NDCG@10 of every window of --window impressions), OUT/summary.json (mean and standard
    error over runs at the last checkpoint, the worst window and its gap to the engine's
    order, impressions per second) and one learning-curve plot per metric. Example (MQ2008,
    fold 1):

    \b
      reranker simulate --train S1.txt.gz S2.txt.gz S3.txt.gz --test S5.txt.gz \\
        --learner preference_perceptron --click-model informational \\
        --impressions 10000 --runs 5 --out mq2008-informational
    """
    from reranker.commands.simulate import run_simulate

    run_simulate(options, convert=_option_value(click.get_current_context()))


def _option_value(ctx: click.Context):
    """A plan file's value checked and converted as the option of that name takes it."""
    params = {param.name: param for param in ctx.command.params}

    def convert(key: str, value: Any) -> Any:
        param = params.get(key)
        if param is None:
            return value
        try:
            return param.type_cast_value(ctx, value)
        except click.BadParameter as exc:
            raise ValueError(exc.message) from None
    return convert
