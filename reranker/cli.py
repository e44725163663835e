"""The ``reranker`` command line."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import click

from . import __version__
from .config import load_config
from .errors import RerankerError
from .users import USER_HELP

CONFIG_HELP = ("YAML config file (see config/default.yaml). Relative paths in it resolve "
               "against its folder. Without it, the defaults apply in the current folder.")


class _Group(click.Group):
    """Turns the project's errors into a one-line message and exit status 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except RerankerError as exc:
            raise click.ClickException(exc.message) from exc


def config_option(func):
    return click.option("--config", "-c", "config_path", type=click.Path(dir_okay=False),
                        default=None, help=CONFIG_HELP)(func)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="reranker")
def cli() -> None:
    """Online learning-to-rank from clicks, on top of a search engine.

    Index documents, serve ranked search results over HTTP, log clicks, and let a learner
    plugin improve the ranking from them.
    """


@cli.command()
@config_option
@click.argument("documents", type=click.Path(dir_okay=False))
@click.option("--recreate", is_flag=True, help="Delete the index and build it anew.")
def index(config_path: str | None, documents: str, recreate: bool) -> None:
    """Load DOCUMENTS (JSON Lines, one object per line with an id and text fields) into the
    configured search backend. Documents with an id already in the index replace it."""
    from .console import progress_bar
    from .documents import read_jsonl
    from .plugins import backend_class, get_plugin_manager

    config = load_config(config_path)
    backend = backend_class(get_plugin_manager(), config.backend.type)(config)
    unreadable: list[tuple[str, str]] = []
    with progress_bar("indexing documents") as advance:
        report = backend.index_documents(read_jsonl(documents, unreadable), recreate=recreate,
                                         progress=advance)
    report.failed[:0] = unreadable
    for where, why in report.failed[:20]:
        click.echo(f"failed: {where}: {why}", err=True)
    if len(report.failed) > 20:
        click.echo(f"... and {len(report.failed) - 20} more failures", err=True)
    click.echo(f"indexed {report.indexed} documents into the {config.backend.type} backend"
               + (f"; {len(report.failed)} failed" if report.failed else ""))
    if report.failed:
        sys.exit(1)


@cli.command()
@config_option
@click.option("--host", default=None, help="Listen address (default: server.host).")
@click.option("--port", type=int, default=None, help="Port (default: server.port; 0 = any free).")
@click.option("--no-trainer", is_flag=True, help="Do not run the background trainer.")
def serve(config_path: str | None, host: str | None, port: int | None, no_trainer: bool) -> None:
    """Start the HTTP service: POST /search, POST /click, GET /healthz.

    Unless disabled, a background trainer applies clicks as their feedback windows close,
    and the service picks up every new model version without a restart.
    """
    import waitress

    from .app import create_app, start_trainer
    from .service import RerankerService

    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = {k: v for k, v in (("server.host", host), ("server.port", port)) if v is not None}
    config = load_config(config_path, overrides)
    service = RerankerService(config).open()
    app = create_app(service=service)
    stop = None
    if config.trainer.enabled and not no_trainer:
        _, stop = start_trainer(service, config.trainer.interval)
    try:
        server = waitress.create_server(app, host=config.server.host, port=config.server.port,
                                        threads=config.server.threads)
    except (OSError, ValueError) as exc:
        if stop is not None:
            stop.set()
        service.close()
        raise click.ClickException(f"server.host/server.port: cannot listen on "
                                   f"{config.server.host}:{config.server.port}: {exc}") from exc
    model = service.model
    click.echo(f"reranker serving learner {model.learner_name} (model version {model.version}) "
               f"on http://{config.server.host}:{server.effective_port}", nl=True)
    sys.stdout.flush()

    def terminate(signum, frame):  # pragma: no cover -- exercised by the subprocess tests
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        if stop is not None:
            stop.set()
        server.close()
        service.close()


@cli.command()
@config_option
@click.option("--close-all", is_flag=True,
              help="Close every open impression now, even inside its feedback window "
                   "(later clicks on them are refused).")
def train(config_path: str | None, close_all: bool) -> None:
    """Apply all pending feedback once and exit.

    Closes the impressions whose feedback window (trainer.feedback_window) has passed,
    applies every closed impression the model has not seen, and saves a new model version.
    Safe to run while `reranker serve` is running.
    """
    from .events import EventStore
    from .trainer import Trainer

    config = load_config(config_path)
    trainer = Trainer.from_config(config, EventStore(config.store.path))
    report = trainer.run_once(close_all=close_all)
    for error in report.model_errors:
        click.echo(f"warning: {error}", err=True)
    for label, arm_report in report.arms.items():
        prefix = f"{label}: " if len(report.arms) > 1 else ""
        if arm_report.versions:
            click.echo(f"{prefix}applied {arm_report.applied} impressions ({arm_report.clicks} "
                       f"clicks, {arm_report.updates} model updates); saved model version "
                       f"{arm_report.version}")
        else:
            click.echo(f"{prefix}nothing to train: no impression is closed and unapplied")
    if report.skipped:
        click.echo(f"skipped {report.skipped} impressions logged with another feature set",
                   err=True)
    stats = trainer.events.stats()
    if stats["open_impressions"]:
        click.echo(f"{stats['open_impressions']} impressions are still inside their feedback "
                   f"window ({config.trainer.feedback_window:g}s); use --close-all to include them")


@cli.command()
@config_option
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write an HTML report with plots to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON (what "
              "GET /experiments answers) instead of tables.")
def report(config_path: str | None, html_path: str | None, as_json: bool) -> None:
    """Results of the configured experiment: per pair of arms the wins, losses, ties, win
    rate with its 95% interval, the sign test's and the always-valid p-value; per arm its
    clicks, metrics and learning curve. Reads the event store; the service may be running.
    """
    import json

    from rich.console import Console

    from .experiments.experiment import offline_status
    from .experiments.report import render_table, write_html
    from .plugins import get_plugin_manager

    status = offline_status(load_config(config_path), get_plugin_manager())
    if as_json:
        click.echo(json.dumps(status, indent=1))
    else:  # piped or in a narrow terminal, the tables keep every column whole
        console = Console()
        render_table(status, Console(width=max(console.width, 160)))
    if html_path:
        click.echo(f"HTML report: {write_html(status, html_path)}", err=as_json)


@cli.command()
@config_option
@click.argument("arm")
def promote(config_path: str | None, arm: str) -> None:
    """Make ARM (a label of experiment.arms) the sole learner: every search is ranked by its
    model, which keeps learning; the other arms' models stay in their folders for a
    rollback. Takes effect in a running service within a second."""
    import yaml

    from .arms import arms_from_config
    from .events import EventStore
    from .experiments.experiment import require_experiment
    from .plugins import get_plugin_manager

    config = load_config(config_path)
    events = EventStore(config.store.path)
    try:
        experiment = require_experiment(config, events)
        state = experiment.promote(arm, "promoted with `reranker promote`")
    finally:
        events.close()
    chosen = next(a for a in arms_from_config(config, get_plugin_manager()) if arm in a.labels)
    section = {"name": chosen.spec.learner,
               "params": dict(config.experiment.arms[arm].get("params", {})),
               "depth": chosen.spec.depth, "discount": chosen.spec.discount}
    click.echo(f"promoted {state['promoted']!r} ({chosen.id}): it now ranks every search of "
               f"experiment {experiment.spec.name!r}.")
    click.echo("To make it permanent, replace the experiment section of the config with this "
               "learner section (the model folder is the same, so the model carries on):")
    click.echo(yaml.safe_dump({"learner": section}, sort_keys=False).rstrip())


@cli.command()
def learners() -> None:
    """List the registered learners with their parameters."""
    from .plugins import get_plugin_manager, learner_classes

    for name, cls in learner_classes(get_plugin_manager()).items():
        try:
            stochastic = bool(cls().stochastic)  # with the default parameters
        except (TypeError, ValueError):  # a plugin that cannot be built without arguments
            stochastic = cls.stochastic if isinstance(cls.stochastic, bool) else False
        click.echo(f"{name}  {'(stochastic) ' if stochastic else ''}{cls.description}")
        for param in cls.params:
            click.echo(f"    {param.describe()}")


@cli.command()
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
    from .demo import run_demo

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


@cli.command(cls=_GreedyCommand)
@click.option("--train", "train", multiple=True, metavar="FILE [FILE ...]",
              help="LETOR/SVMlight files whose queries form the interaction stream "
                   "(gzip or plain; files without qid need a .query file beside them).")
@click.option("--test", "test", metavar="FILE",
              help="LETOR file of held-out queries for offline NDCG@10.")
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
@click.option("--window", type=click.IntRange(min=1), help="Impressions per window of online "
              "NDCG@10 for the worst-window report [default: 200].")
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
    from .simulate_command import run_simulate

    run_simulate(options)


def main() -> None:
    cli(prog_name="reranker")


if __name__ == "__main__":  # pragma: no cover
    main()
