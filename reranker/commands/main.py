"""The ``reranker`` command line."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reranker import __version__
from reranker.core.config import load_config, serving_description, warnings_held
from reranker.core.errors import RerankerError
from reranker.offline.users import USER_HELP

if TYPE_CHECKING:
    from rich.console import Console

    from reranker.core.config import Config
    from reranker.models.arms import Arm
    from reranker.models.model import RankingModel

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
    from reranker.backends.documents import checked_documents, read_jsonl
    from reranker.commands.console import progress_bar
    from reranker.core.errors import DataError
    from reranker.core.plugins import backend_class, get_plugin_manager

    config = load_config(config_path)
    if not Path(documents).is_file():  # before the backend creates anything
        raise DataError(f"document file {documents} does not exist")
    backend = backend_class(get_plugin_manager(), config.backend.type)(config)
    unreadable: list[tuple[str, str]] = []
    # (checked before the backend writes or deletes anything)
    checked = checked_documents(read_jsonl(documents, unreadable), config, unreadable,
                                source=documents,
                                adding=not recreate and backend.index_exists() is True,
                                takes_as_number=backend.takes_as_number)
    with progress_bar("indexing documents") as advance:
        report = backend.index_documents(checked, recreate=recreate, progress=advance)
    report.failed[:0] = unreadable
    for where, why in report.failed[:20]:
        click.echo(f"failed: {where}: {why}", err=True)
    if len(report.failed) > 20:
        click.echo(f"... and {len(report.failed) - 20} more failures", err=True)
    click.echo(f"indexed {report.indexed} documents into the {config.backend.type} backend"
               + (f"; {len(report.failed)} failed" if report.failed else ""))
    if report.failed or not report.indexed:
        sys.exit(1)


@cli.command()
@config_option
@click.option("--host", default=None, help="Listen address (default: server.host).")
@click.option("--port", type=int, default=None, help="Port (default: server.port; 0 = any free).")
@click.option("--workers", type=click.IntRange(0, 256), default=None,
              help="Worker processes (default: server.workers; 0 = serve from this process).")
@click.option("--no-trainer", is_flag=True, help="Do not run the background trainer.")
def serve(config_path: str | None, host: str | None, port: int | None, workers: int | None,
          no_trainer: bool) -> None:
    """Start the HTTP service: POST /search, POST /click, GET /healthz.

    Unless disabled, a background trainer applies clicks as their feedback windows close,
    and the service picks up every new model version without a restart. With --workers N,
    gunicorn serves from N worker processes sharing the event store and the model folder;
    one of them runs the trainer.
    """
    overrides = {k: v for k, v in (("server.host", host), ("server.port", port),
                                   ("server.workers", workers)) if v is not None}
    with warnings_held():  # (said once logging is set up as configured)
        config = load_config(config_path, overrides)
        if config.server.workers and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            # Metrics summed over the workers: prometheus_client's multiprocess mode, which
            # it decides when first imported, so before anything imports it here
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(
                prefix="reranker-metrics-")
        from reranker.serving.monitoring import configure_logging

        configure_logging(config.server.log_format)
    if config.server.workers:
        from reranker.api.wsgi import serve_workers

        serve_workers(config_path, overrides, trainer=not no_trainer)
        return
    from reranker.api.app import create_server, serving_app
    from reranker.serving.service import RerankerService

    service = RerankerService(config).open()
    app, stop = serving_app(service, config.trainer.interval
                            if config.trainer.enabled and not no_trainer else None)
    try:
        server = create_server(app, host=config.server.host, port=config.server.port)
    except (OSError, ValueError) as exc:
        if stop is not None:
            stop.set()
        service.close()
        raise click.ClickException(f"server.host/server.port: cannot listen on "
                                   f"{config.server.host}:{config.server.port}: {exc}") from exc
    if service.experiment is None:
        model = service.model
        serving = f"learner {model.learner_name} (model version {model.version})"
    else:
        serving = serving_description(config, {label: info["model_version"] for label, info
                                               in service.arm_info().items()})
    click.echo(f"reranker serving {serving} on http://{config.server.host}:"
               f"{server.effective_port}", nl=True)
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
@click.option("--follow", is_flag=True,
              help="Keep training every trainer.interval seconds until stopped (SIGTERM or "
                   "Ctrl-C), while this process leads the store's trainers.")
def train(config_path: str | None, close_all: bool, follow: bool) -> None:
    """Apply all pending feedback once and exit.

    Closes the impressions whose feedback window (trainer.feedback_window) has passed,
    applies every closed impression the model has not seen, and saves a new model version.
    Safe to run while `reranker serve` is running. With --follow, it is the trainer of
    services started with --no-trainer, on this machine or others sharing the store.
    """
    from reranker.models.trainer import Trainer, unsaved_note
    from reranker.stores import open_event_store

    if follow:
        if close_all:
            raise click.UsageError("--close-all and --follow do not go together")
        from reranker.serving.monitoring import configure_logging

        with warnings_held():  # (said once logging is set up as configured)
            config = load_config(config_path)
            configure_logging(config.server.log_format)
        _follow(config)
        return
    config = load_config(config_path)
    events = open_event_store(config)
    try:
        trainer = Trainer.from_config(config, events)
        report = trainer.run_once(close_all=close_all)
        trainer.last_error = "; ".join(report.errors.values()) or None
        trainer.record(report)  # (what the services' /healthz read of the store's trainer)
        stats = events.stats()
    finally:
        events.close()
    for error in report.model_errors:
        click.echo(f"warning: {error}", err=True)
    for label, arm_report in report.arms.items():
        prefix = f"{label}: " if len(trainer.arms) > 1 else ""
        if arm_report.versions:
            click.echo(f"{prefix}applied {arm_report.applied} impressions ({arm_report.clicks} "
                       f"clicks, {arm_report.updates} model updates); saved model version "
                       f"{arm_report.version}{unsaved_note(arm_report)}")
        else:
            if arm_report.applied:
                click.echo(f"{prefix}applied {arm_report.applied} impressions "
                           f"({arm_report.clicks} clicks); they taught the model nothing, so "
                           f"no version was saved")
            else:
                click.echo(f"{prefix}nothing to train: no impression is closed and unapplied")
    for why, count in report.uninformative.items():
        click.echo(f"{count} clicks taught nothing: {why} (POST /explain with an impression id "
                   f"says why for one page)")
    if report.skipped:
        click.echo(f"skipped {report.skipped} impressions whose update failed or whose features "
                   f"are not the model's (the log says which)", err=True)
    if stats["open_impressions"]:
        click.echo(f"{stats['open_impressions']} impressions are still inside their feedback "
                   f"window ({config.trainer.feedback_window:g}s); use --close-all to include them")
    if report.errors:
        for error in report.errors.values():
            click.echo(f"Error: training {error}; its impressions wait for the next run",
                       err=True)
        sys.exit(1)


@cli.command()
@config_option
@click.option("--older-than", "age", type=click.FloatRange(min=1.0), default=None,
              metavar="SECONDS", help="Remove impressions older than this many seconds "
              "(default: store.retention).")
@click.option("--vacuum", is_flag=True,
              help="Then give the freed space back to the file system (SQLite: VACUUM, which "
                   "rewrites the file while searches and clicks wait); without it, new "
                   "impressions reuse the space.")
def prune(config_path: str | None, age: float | None, vacuum: bool) -> None:
    """Remove the impressions older than store.retention that every arm has learned from.

    They are deleted with their clicks and rewards, except those of the running experiment,
    which are compacted: their features dropped, their pages kept for its report. The counts
    of the click features stay. Safe to run while `reranker serve` is running, whose trainer
    does the same every store.retention_interval seconds.
    """
    from reranker.models.trainer import Trainer
    from reranker.stores import open_event_store

    config = load_config(config_path)
    age = config.store.retention if age is None else age
    if age is None:
        raise click.UsageError("set store.retention in the config, or pass --older-than")
    events = open_event_store(config)
    try:
        size = events.disk_bytes()
        retained = Trainer.from_config(config, events).retain(age)
        if vacuum:
            events.vacuum()
        now = events.disk_bytes()
    finally:
        events.close()
    done = (f"deleted {retained.deleted} impressions older than {_duration(age)} that every "
            f"arm has learned from")
    if config.experiment.mode:
        done += f"; compacted {retained.compacted} of experiment {config.experiment.name!r}"
    click.echo(done)
    if size is not None:
        why = ""
        kept = (retained.deleted or retained.compacted) and round(now / 1e5) >= round(size / 1e5)
        if config.store.type == "sqlite" and not vacuum and kept:
            why = ("; the space of the deleted impressions is reused by new ones (--vacuum "
                   "gives it back), and the write-ahead log holds the deletions until its "
                   "next checkpoint")
        elif config.store.type == "postgresql" and kept:
            why = ("; PostgreSQL keeps the space of deleted rows for new ones (its vacuum, "
                   "automatic or --vacuum, marks it free; only VACUUM FULL, which locks the "
                   "tables while it rewrites them, gives it back to the file system)")
        click.echo(f"the event store takes {now / 1e6:.1f} MB on disk (before: "
                   f"{size / 1e6:.1f} MB){why}")


def _duration(seconds: float) -> str:
    """``seconds`` in the largest unit that keeps it a round number or above 1: ``30 days``,
    ``36 hours``, ``90 s``."""
    for unit, length in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if seconds >= length and (seconds % length == 0 or seconds >= 2 * length):
            return f"{seconds / length:g} {unit}" if seconds % length == 0 else \
                f"{seconds / length:.1f} {unit}"
    return f"{seconds:g} s"


def _follow(config: Config) -> None:
    """``reranker train --follow``: the leader-mode training loop until SIGTERM or SIGINT."""
    import threading

    from reranker.models.trainer import Trainer
    from reranker.stores import open_event_store

    events = open_event_store(config)
    stop = threading.Event()

    def terminate(signum, frame):  # pragma: no cover -- exercised by the subprocess tests
        stop.set()

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    try:
        trainer = Trainer.from_config(config, events)
        click.echo(f"reranker training from {events.location} every "
                   f"{config.trainer.interval:g}s (Ctrl-C stops)")
        trainer.run_forever(stop, config.trainer.interval, lead=True)
    finally:
        events.close()


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

    from reranker.core.plugins import get_plugin_manager
    from reranker.experiments.experiment import offline_status
    from reranker.experiments.report import render_table, write_html

    status = offline_status(load_config(config_path), get_plugin_manager())
    if html_path:  # (a folder that is not there fails before anything is printed)
        folder = Path(html_path).resolve().parent
        if not folder.is_dir():
            raise click.BadParameter(f"folder {folder} does not exist", param_hint="--html")
    if as_json:
        click.echo(json.dumps(status, indent=1))
    else:
        render_table(status, _wide_console())
        if status.get("note"):
            click.echo(f"note: {status['note']}")
    if html_path:
        try:
            written = write_html(status, html_path)
        except OSError as exc:
            raise click.BadParameter(f"{html_path} cannot be written: {exc.strerror or exc}",
                                     param_hint="--html") from None
        click.echo(f"HTML report: {written}", err=as_json)


@cli.command()
@config_option
@click.argument("arm")
@click.option("--force", is_flag=True,
              help="Promote ARM even though the guarded rollout held it (it lost to the "
                   "control significantly).")
def promote(config_path: str | None, arm: str, force: bool) -> None:
    """Make ARM (a label of experiment.arms) the sole learner: every search is ranked by its
    model, which keeps learning; the other arms' models stay in their folders for a
    rollback. Takes effect in a running service within a second."""
    import yaml

    from reranker.core.plugins import get_plugin_manager
    from reranker.experiments.experiment import require_experiment
    from reranker.models.arms import arms_from_config
    from reranker.stores import open_event_store

    config = load_config(config_path)
    events = open_event_store(config, existing=True)
    try:
        experiment = require_experiment(config, events)
        state = experiment.state(fresh=True)
        held = state.get("held", {})
        if arm in held and not force:
            why = held[arm].get("because", "it lost to the control")
            raise click.ClickException(f"arm {arm!r} is held ({why}): it is not served any "
                                       f"more; promote it anyway with --force")
        losses = [pair for pair in experiment.results(arms=False)[1]
                  if arm in pair["arms"] and pair["significant"] and pair["winner"] != arm]
        if losses and not force:
            pair = losses[0]
            raise click.ClickException(
                f"arm {arm!r} loses to {pair['winner']!r} significantly (wins "
                f"{pair['wins']}, losses {pair['losses']}, always-valid p "
                f"{pair['always_valid_p']:.2g}, first arm {pair['arms'][0]!r}); promote it "
                f"anyway with --force")
        before = experiment.promoted(state)
        state = experiment.promote(arm, "promoted with `reranker promote`"
                                   + (" --force, held before" if arm in held else "")
                                   + (" --force, losing" if losses else ""))
    finally:
        events.close()
    if before is not None and before != arm:
        click.echo(f"(this replaces the promotion of {before!r})")
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
@config_option
@click.option("--learner", "learner_name", default=None, metavar="NAME",
              help="The target learner (default: the config's learner section).")
@click.option("--param", "params", multiple=True, metavar="LEARNER.KEY=VALUE",
              help="A parameter of the target learner, e.g. pdgd.learning_rate=0.05.")
@click.option("--version", "version", type=int, default=None,
              help="A saved model version of the target, or 0 for its initial model "
                   "(default: its newest, or its initial model when it has none).")
@click.option("--depth", type=click.IntRange(1, 100), default=10, show_default=True,
              help="K of clicks@K, the metric estimated.")
@click.option("--since", default=None, metavar="TIME",
              help="Only pages served from this ISO 8601 time on (UTC without an offset), "
                   "e.g. since a stochastic learner began to serve.")
@click.option("--logged-by", "logged_by", default=None, metavar="LEARNER",
              help="Only pages served by this learner (the logging policy's name, as "
                   "/search answers it).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def evaluate(config_path: str | None, learner_name: str | None, params: tuple[str, ...],
             version: int | None, depth: int, since: str | None, logged_by: str | None,
             as_json: bool) -> None:
    """Estimate from the logged pages and clicks how a learner's model would have done:
    its clicks@K by item-position IPS, self-normalised IPS and a doubly robust estimator,
    with 95% intervals and effective sample sizes, beside the logged policy's own.

    Needs logs of a stochastic policy (its impressions carry each shown result's chance of
    its position); refuses when the logging policy gave zero probability to what the target
    would show. Reads the event store; the service may be running.
    """
    import json

    from reranker.core.config import parse_time
    from reranker.core.errors import ConfigError, UnprocessableError
    from reranker.core.plugins import get_plugin_manager
    from reranker.evaluation.estimators import SupportError
    from reranker.evaluation.estimators import evaluate as estimate
    from reranker.evaluation.logs import pages_from_log
    from reranker.models.arms import ARM_DEFAULTS, Arm, arm_section, build_arm
    from reranker.offline.simulation import parse_param
    from reranker.stores import open_event_store

    config = load_config(config_path)
    name = learner_name or config.learner.name
    section: dict[str, Any] = {"name": name, "params": {}}
    if learner_name is None:
        section["params"] = dict(config.learner.params)
    for text in params:
        owner, key, value = parse_param(text)
        if owner != name:
            raise ConfigError(f"--param {text!r} is for learner {owner!r}, the target is "
                              f"{name!r}")
        section["params"][key] = value
    defaults = {k: config.learner[k] for k in ARM_DEFAULTS}
    where = "--learner" if learner_name else "learner"  # (the config's section otherwise)
    section = arm_section("target", section, defaults, where)
    spec, factory = build_arm("target", section, config, get_plugin_manager(), where,
                              name_key="--learner" if learner_name else None,
                              params_key="--param" if params else None)
    arm = Arm(spec, factory, config.store.models, max_bytes=config.store.max_model_bytes)
    if version == 0:  # the initial model, never saved (as /search calls it)
        model = factory.new()
    elif version is not None:
        model = arm.load_version(version, f"--version: learner {name!r} ({arm.id})")
    else:
        model, _ = arm.models.load_latest(factory)
        model = model or factory.new()
    def target(X, k):
        at = model.learner.position_marginals(X, k) if model.learner.exact_probabilities \
            else None
        if at is None:
            raise UnprocessableError(f"learner {name!r} cannot say where it would place each "
                                     f"result (its policy has no exact probabilities), so no "
                                     f"off-policy estimate of it is possible")
        return at

    start = parse_time(since, "--since") if since is not None else None
    events = open_event_store(config, existing=True)
    try:
        logged = pages_from_log(events, model, since=start, logged_by=logged_by)
    finally:
        events.close()
    skipped = "; ".join(f"{n} {why}" for why, n in logged.skipped.items())
    if not logged.pages:
        raise UnprocessableError(
            f"no logged first page to evaluate on in {events.location}"
            + (f" (passed over: {skipped})" if skipped else "") + "; serve a stochastic "
            "learner and close its impressions (`reranker train`) first")
    try:
        result = estimate(target, logged.pages, depth)
    except SupportError as exc:
        hint = "" if since or logged_by else (
            "; when the log holds another policy's pages too, --logged-by LEARNER or --since "
            "TIME evaluates on the part that can tell")
        raise UnprocessableError(f"{exc}{hint}") from None
    target = {"learner": name, "arm": arm.id, "model_version": model.version}
    if as_json:
        click.echo(json.dumps({"target": target, **result.to_dict(),
                               "skipped": dict(logged.skipped)}, indent=1))
        return
    click.echo(f"target: {name} ({arm.id}), model version {model.version}; "
               f"{result.pages} logged first pages" + (f" (passed over: {skipped})"
                                                       if skipped else ""))
    click.echo(f"{'':<22}{'clicks@' + str(depth):>12}{'95% interval':>22}"
               f"{'effective n':>14}")
    low, high = result.logged_interval
    click.echo(f"{'logged policy':<22}{result.logged_value:>12.4f}"
               f"{f'{low:.4f} - {high:.4f}':>22}{result.pages:>14,}")
    for e in result.estimates:
        click.echo(f"{'target, ' + e.name:<22}{e.value:>12.4f}"
                   f"{f'{e.low:.4f} - {e.high:.4f}':>22}{e.ess:>14,.0f}")
    for note in result.notes:
        click.echo(f"note: {note}")


@cli.command()
def learners() -> None:
    """List the registered learners with their parameters."""
    from reranker.core.plugins import get_plugin_manager, learner_classes

    for name, cls in learner_classes(get_plugin_manager()).items():
        try:
            stochastic = bool(cls().stochastic)  # with the default parameters
        except (TypeError, ValueError):  # a plugin that cannot be built without arguments
            stochastic = cls.stochastic if isinstance(cls.stochastic, bool) else False
        click.echo(f"{name}  {'(stochastic) ' if stochastic else ''}{cls.description}")
        click.echo(f"    experiments: {_experiment_modes(cls)}")
        for param in cls.params:
            click.echo(f"    {param.describe()}")


def _experiment_modes(cls) -> str:
    """What a learner learns from as an experiment's arm, in words."""
    if getattr(cls, "floor", False):
        return "a floor: it never learns; any mode"
    if getattr(cls, "learns_from_mixed_lists", False):
        return "learns from its own pages and the mixed pages it takes part in; any mode"
    return ("learns only from pages it ranks itself: experiment.mode split (interleave and "
            "multileave are refused)")


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


@cli.command(cls=_GreedyCommand)
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
              "which a query's clicks judge a result (learner.confidence) [default: 0.95].")
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


# -- reranker models ----------------------------------------------------------------------------

ARM_HELP = "Label of the arm (a key of experiment.arms); needed when the config has several."


def _arm_option(func):
    return click.option("--arm", "label", default=None, metavar="LABEL", help=ARM_HELP)(func)


def _config_arms(config_path: str | None) -> tuple[Config, list[Arm]]:
    """The configuration and its arms (read only: no folder is created)."""
    from reranker.core.plugins import get_plugin_manager
    from reranker.models.arms import arms_from_config

    config = load_config(config_path)
    return config, arms_from_config(config, get_plugin_manager())


def _one_arm(config_path: str | None, label: str | None) -> Arm:
    """The arm labelled ``label``, or the only arm; the error lists the labels."""
    from reranker.core.errors import BadRequestError, NotFoundError

    config, arms = _config_arms(config_path)
    labels = [name for arm in arms for name in arm.labels]
    where = config.source or "the default configuration"
    if label is None:
        if len(arms) == 1:
            return arms[0]
        raise BadRequestError(f"{where} has several arms ({', '.join(labels)}): choose one with "
                              f"--arm LABEL")
    for arm in arms:
        if label in arm.labels:
            return arm
    raise NotFoundError(f"{where} has no arm {label!r}; its arms are {', '.join(labels)}")


def _wide_console() -> Console:
    """A console that keeps table columns whole: piped, as wide as the tables are; in a
    terminal, at least 160 columns wide."""
    from rich.console import Console

    console = Console()
    return Console(width=max(console.width, 160) if console.is_terminal else 1000)


def _versions_of(arm: Arm) -> dict[str, Any]:
    """What ``models list`` shows of one arm, as JSON-ready data."""
    from reranker.core.errors import ModelLoadError, RerankerError
    from reranker.models.arms import pinned_gone

    try:
        pinned = arm.models.pinned()
    except RerankerError as exc:
        pinned, pin_error = None, exc.message
    else:
        pin_error = None
    try:  # where a feature-set change carried its first version from, or will
        carried_from = arm.arm_file().get("carried_from")
        found = None if arm.models.dir.exists() else arm.predecessor()
    except ModelLoadError as exc:
        carried_from, found, pin_error = None, None, pin_error or exc.message
    starts_from = None if found is None else {"how": found[0], "folder": found[1].name}
    versions = arm.models.versions()
    rows, serving, newest_good = [], None, None
    for version in versions:
        row = {"version": version, "saved": arm.models.saved_at(version)}
        try:
            model = arm.models.load(version, arm.factory)
        except ModelLoadError as exc:
            row["error"] = exc.message
        else:
            row.update({key: getattr(model.progress, key)
                        for key in ("impressions", "clicks", "updates", "skipped", "cursor")})
            newest_good = version
        rows.append(row)
    loads = {row["version"] for row in rows if "error" not in row}
    if pinned is not None and pinned not in versions and pin_error is None:
        pin_error = pinned_gone(arm.models, pinned)
    if pinned is not None:
        serving = pinned if pinned in loads else None
    elif pin_error is None:
        serving = 0 if newest_good is None else newest_good
    return {"label": arm.label, "labels": list(arm.labels), "id": arm.id,
            "learner": arm.spec.learner, "folder": str(arm.models.dir),
            "next_version": arm.models.next_version(), "pinned": pinned,
            "pin_error": pin_error, "serving": serving,
            "newest": versions[-1] if versions else None, "versions": rows,
            "carried_from": carried_from, "starts_from": starts_from}


@cli.group(cls=_Group)
def models() -> None:
    """Inspect and manage the saved model versions of each arm: list them, show one, pin the
    version every service serves, or roll back to an older one.

    Version numbers are never reused, even after model files are deleted or pruned.
    """


@models.command("list")
@config_option
@_arm_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def list_models(config_path: str | None, label: str | None, as_json: bool) -> None:
    """List each arm's saved versions with their training progress; mark the version being
    served, the pinned one and the newest. Versions that fail to load are listed with the
    reason. Safe while the service runs."""
    import json

    from rich.table import Table

    from reranker.experiments.report import format_time

    arms = [_one_arm(config_path, label)] if label else _config_arms(config_path)[1]
    listing = [_versions_of(arm) for arm in arms]
    if as_json:
        click.echo(json.dumps(listing, indent=1))
        return
    console = _wide_console()
    for info in listing:
        click.echo(f"arm {', '.join(info['labels'])} ({info['id']}), learner {info['learner']}, "
                   f"folder {info['folder']}")
        carried = info["carried_from"]
        if carried:
            click.echo(f"  started from version {carried.get('version')} of "
                       f"{carried.get('arm')} when the feature set changed "
                       f"({carried.get('change')})")
        if info["pin_error"]:
            click.echo(f"  warning: {info['pin_error']}")
        elif info["pinned"] is not None and info["serving"] is None:
            click.echo(f"  warning: the pinned version {info['pinned']} does not load: a "
                       f"running service keeps its model, a starting one refuses to start")
        if not info["versions"]:
            start = info["starts_from"]
            if start:
                how = ("takes over" if start["how"] == "take over"
                       else "starts from the newest model of")
                click.echo(f"  no folder yet: the first `serve` or `train` {how} "
                           f"{start['folder']}")
            else:
                click.echo("  no saved version: the service serves version 0, the learner's "
                           "initial model")
            continue
        table = Table()
        table.add_column("Version", justify="right")
        table.add_column("Saved")
        for name in ("Impressions", "Clicks", "Updates", "Skipped", "Cursor"):
            table.add_column(name, justify="right")
        table.add_column("Marks")
        for row in info["versions"]:
            marks = [name for name in ("serving", "pinned", "newest")
                     if info[name] == row["version"]]
            if "error" in row:
                marks.append("refused")
            table.add_row(str(row["version"]), format_time(row["saved"]),
                          *(str(row.get(key, "-")) for key in
                            ("impressions", "clicks", "updates", "skipped", "cursor")),
                          ", ".join(marks))
        console.print(table)
        for row in info["versions"]:
            if "error" in row:
                click.echo(f"  version {row['version']} is refused: {row['error']}")
        click.echo(f"  next version: {info['next_version']}")


def _summary(value: Any) -> str:
    """A state entry in a few words: scalars as they are, arrays by their range and norm."""
    import numpy as np

    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiu":
            return f"{value.size} values"
        if value.size <= 4:
            return ", ".join(f"{float(v):.6g}" for v in value.ravel())
        return (f"min {float(value.min()):.6g}, max {float(value.max()):.6g}, "
                f"mean {float(value.mean()):.6g}, norm {float(np.linalg.norm(value)):.6g}")
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _describe(arm: Arm, model: RankingModel) -> dict[str, Any]:
    """What ``models show`` shows of one model, as JSON-ready data (the learned state as the
    model file has it)."""
    import numpy as np

    from reranker.learners.base import LinearLearner

    learner, names = model.learner, list(model.feature_names)
    weights = None
    if isinstance(learner, LinearLearner):
        learned = np.asarray(learner.learned_weights(), dtype=np.float64)
        total = np.asarray(learner.weights(), dtype=np.float64)
        weights = {name: {"learned": float(a), "start": float(b - a), "total": float(b)}
                   for name, a, b in zip(names, learned, total, strict=True)}
    saved = model.to_dict()
    return {"arm": {"label": arm.label, "labels": list(arm.labels), "id": arm.id,
                    "folder": str(arm.models.dir)},
            "version": model.version,
            "file": str(arm.models.path(model.version)) if model.version else None,
            "saved": arm.models.saved_at(model.version) if model.version else None,
            "learner": saved["learner"], "feature_map": saved["feature_map"],
            "features": names, "normalization": saved["features"]["normalization"],
            "training": saved["training"], "weights": weights, "state": saved["state"]}


@models.command()
@config_option
@_arm_option
@click.argument("version", type=int, required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the learned state in full) "
              "instead of tables.")
def show(config_path: str | None, label: str | None, version: int | None,
         as_json: bool) -> None:
    """Show VERSION of an arm's model (default: the version being served): its learner and
    parameters, feature map, normalisation, training progress, and its weights by feature
    name (learned, the starting ranking's, and their total, which ranks; for learners without
    one weight vector, their learned state)."""
    import json

    import numpy as np
    from rich.table import Table

    from reranker.experiments.report import format_time

    arm = _one_arm(config_path, label)
    if version is None:
        version = arm.serving_version()
    model = arm.factory.new() if version == 0 else arm.load_version(version)
    info = _describe(arm, model)
    state = model.learner.get_state()
    if as_json:
        click.echo(json.dumps(info, indent=1))
        return
    listing = _versions_of(arm)
    marks = [name for name in ("serving", "pinned", "newest") if listing[name] == version]
    click.echo(f"arm {', '.join(arm.labels)} ({arm.id}), folder {arm.models.dir}")
    if version == 0:
        click.echo("version 0: the learner's initial model (never saved)"
                   + (f" [{', '.join(marks)}]" if marks else ""))
    else:
        click.echo(f"version {version}, saved {format_time(info['saved'])}"
                   + (f" [{', '.join(marks)}]" if marks else "") + f": {info['file']}")
    params = ", ".join(f"{k}={v!r}" for k, v in info["learner"]["params"].items())
    click.echo(f"learner {info['learner']['name']}" + (f" ({params})" if params else ""))
    fmap = info["feature_map"]
    click.echo(f"feature map: depth {fmap['depth']}, discount {fmap['discount']}")
    norm = info["normalization"]
    count = norm["state"].get("count")
    click.echo(f"normalisation: {norm['method']}"
               + (f" (statistics of {count} candidates)" if count is not None else ""))
    training = info["training"]
    click.echo("training: " + ", ".join(f"{key} {training[key]}" for key in
                                        ("cursor", "impressions", "clicks", "updates",
                                         "skipped"))
               + f", event store {training['store_id'] or '-'}")

    console = _wide_console()
    names = info["features"]
    columns: dict[str, list[str]] = {}
    if info["weights"] is not None:
        for key, title in (("learned", "Learned"), ("start", "Starting ranking"),
                           ("total", "Total (ranks)")):
            columns[title] = [f"{info['weights'][name][key]:+.6g}" for name in names]
    else:
        for key, value in state.items():
            if isinstance(value, np.ndarray) and value.shape == (len(names),) \
                    and value.dtype.kind in "fiu":
                columns[key] = [f"{float(v):.6g}" for v in value]
    if norm["method"] == "zscore" and count:
        mean = np.asarray(norm["state"]["mean"])
        sd = np.sqrt(np.asarray(norm["state"]["m2"]) / max(count - 1, 1))
        columns["Mean"] = [f"{v:.6g}" for v in mean]
        columns["Deviation"] = [f"{v:.6g}" for v in sd]
    if columns:
        table = Table(title="Weights by feature" if info["weights"] is not None
                      else "Learned state by feature", title_justify="left")
        table.add_column("Feature")
        for title in columns:
            table.add_column(title, justify="right")
        for i, name in enumerate(names):
            table.add_row(name, *(values[i] for values in columns.values()))
        console.print(table)
    table = Table(title="Learned state", title_justify="left")
    table.add_column("Name")
    table.add_column("Shape")
    table.add_column("Value")
    for key, value in state.items():
        if key in ("n_features_in_", "feature_names_in_"):
            continue
        shape = "x".join(map(str, value.shape)) if isinstance(value, np.ndarray) else "-"
        table.add_row(key, shape, _summary(value))
    console.print(table)


@models.command()
@config_option
@_arm_option
@click.argument("version", type=int)
def pin(config_path: str | None, label: str | None, version: int) -> None:
    """Serve VERSION of an arm's model in every service of this config (within a second,
    without a restart) until `reranker models unpin`. Training goes on from the newest
    version meanwhile, so unpinning serves the newest again. Pruning keeps the pinned
    version. A version that does not exist or does not load is refused."""
    arm = _one_arm(config_path, label)
    before = arm.pin(version)
    note = f" (instead of version {before})" if before not in (None, version) else ""
    click.echo(f"pinned version {version} of arm {arm.label!r}{note}: every service of this "
               f"config serves it until `reranker models unpin`")


@models.command()
@config_option
@_arm_option
def unpin(config_path: str | None, label: str | None) -> None:
    """Remove an arm's pin: services serve its newest version again."""
    arm = _one_arm(config_path, label)
    before = arm.unpin()
    if before is None:
        click.echo(f"arm {arm.label!r} was not pinned; services serve its newest version")
    else:
        click.echo(f"unpinned version {before} of arm {arm.label!r}: services serve its newest "
                   f"version again")


@models.command()
@config_option
@_arm_option
@click.argument("version", type=int, required=False)
def rollback(config_path: str | None, label: str | None, version: int | None) -> None:
    """Go back to the weights of VERSION (default: the version before the newest) and learn on
    from there. Saves a new version with the learned state and normalisation of VERSION and
    the training cursor and counters of the newest version: the impressions applied since
    VERSION are dropped from the model and not applied again. Services serve the new version
    within a second (unless a version is pinned)."""
    arm = _one_arm(config_path, label)
    model, target, newest = arm.rollback(version)
    dropped = newest.progress.impressions - target.progress.impressions
    click.echo(f"saved version {model.version} of arm {arm.label!r}: the weights and "
               f"normalisation of version {target.version}, the training cursor of version "
               f"{newest.version} (impression {newest.progress.cursor})")
    click.echo(f"what the {max(dropped, 0)} impressions applied after version {target.version} "
               f"taught is dropped from the model; they are not applied again, and learning "
               f"goes on from version {model.version}")
    pinned = arm.models.pinned()
    if pinned is not None:
        click.echo(f"note: version {pinned} is pinned: services keep serving it until "
                   f"`reranker models unpin`")


def main() -> None:
    cli(prog_name="reranker")


if __name__ == "__main__":  # pragma: no cover
    main()
