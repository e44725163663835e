"""``reranker train`` and ``reranker prune``: apply the pending feedback, follow the store as
its trainer, and remove what retention allows."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

import click

from reranker.core.config import load_config, warnings_held

if TYPE_CHECKING:

    from reranker.core.config import Config

from reranker.commands.options import config_option


@click.command()
@config_option
@click.option("--close-all", is_flag=True,
              help="Close every open impression now, even inside its feedback window "
                   "(later clicks on them are refused).")
@click.option("--follow", is_flag=True,
              help="Keep training every trainer.interval seconds until stopped (SIGTERM or "
                   "Ctrl-C), while this process leads the store's trainers.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes that apply an experiment's arms at once (the arms are dealt out "
                   "between them; more than the arms or the cores gains nothing).")
def train(config_path: str | None, close_all: bool, follow: bool, jobs: int) -> None:
    """Apply all pending feedback once and exit.

    Closes the impressions whose feedback window (trainer.feedback_window) has passed,
    applies every closed impression the model has not seen, and saves a new model version.
    Safe to run while `reranker serve` is running. With --follow, it is the trainer of
    services started with --no-trainer, on this machine or others sharing the store.
    With --jobs N, an experiment's arms learn at once in N processes.
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
        _follow(config, jobs)
        return
    config = load_config(config_path)
    events = open_event_store(config)
    trainer = None
    try:
        trainer = Trainer.from_config(config, events)
        if trainer.train_in_processes(config, jobs) < jobs:
            click.echo(f"--jobs {jobs}: {len(trainer.arms)} arm(s), so "
                       f"{min(jobs, len(trainer.arms))} process(es) train", err=True)
        report = trainer.run_once(close_all=close_all)
        trainer.last_error = "; ".join(report.errors.values()) or None
        trainer.record(report)  # (what the services' /healthz read of the store's trainer)
        stats = events.stats()
    finally:
        if trainer is not None:
            trainer.close()
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
    if report.balanced:
        click.echo(f"{report.balanced} pages of frequent queries passed over by the query "
                   f"balance (learner.query_balance: each query's pages learned from as if the "
                   f"queries were searched equally often)")
    if report.bounded:
        click.echo(f"{report.bounded} pages passed over: their client's training budget was "
                   f"spent (security.client_budget, address_budget, query_budget)")
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


@click.command()
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


def _follow(config: Config, jobs: int = 1) -> None:
    """``reranker train --follow``: the leader-mode training loop until SIGTERM or SIGINT."""
    import functools
    import threading

    from reranker.models.trainer import Trainer
    from reranker.serving.monitoring import configure_logging
    from reranker.stores import open_event_store

    events = open_event_store(config)
    stop = threading.Event()

    def terminate(signum, frame):  # pragma: no cover -- exercised by the subprocess tests
        stop.set()

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    trainer = None
    try:
        trainer = Trainer.from_config(config, events)
        processes = trainer.train_in_processes(
            config, jobs, setup=functools.partial(configure_logging, config.server.log_format))
        arms = f", {len(trainer.arms)} arms in {processes} processes" if processes > 1 else ""
        click.echo(f"reranker training from {events.location} every "
                   f"{config.trainer.interval:g}s{arms} (Ctrl-C stops)")
        trainer.run_forever(stop, config.trainer.interval, lead=True)
    finally:
        if trainer is not None:
            trainer.close()
        events.close()
