"""``reranker report`` and ``reranker promote``: the configured experiment's results, and
making one arm the sole learner."""

from __future__ import annotations

from pathlib import Path

import click

from reranker.commands.options import config_option, wide_console
from reranker.core.config import load_config


@click.command()
@config_option
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write an HTML report with plots to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON (what "
              "GET /experiments answers) instead of tables.")
def report(config_path: str | None, html_path: str | None, as_json: bool) -> None:
    """Results of the configured experiment: per pair of arms the wins, losses, ties, win
    rate with its 95% interval, the sign test's and the always-valid p-value and the verdict
    in words; per arm its clicks, click measures and learning curve. Reads the event store;
    the service may be running.
    """
    import json

    from reranker.core.plugins import get_plugin_manager
    from reranker.experiments.experiment import offline_status
    from reranker.experiments.report import render_table, write_html
    from reranker.experiments.report_model import build_report

    status = offline_status(load_config(config_path), get_plugin_manager())
    model = build_report(status)  # one model for the tables and the HTML report
    if html_path:  # (a folder that is not there fails before anything is printed)
        folder = Path(html_path).resolve().parent
        if not folder.is_dir():
            raise click.BadParameter(f"folder {folder} does not exist", param_hint="--html")
    if as_json:
        click.echo(json.dumps(status, indent=1))
    else:
        render_table(model, wide_console())
        if status.get("note"):
            click.echo(f"note: {status['note']}")
    if html_path:
        try:
            written = write_html(model, html_path)
        except OSError as exc:
            raise click.BadParameter(f"{html_path} cannot be written: {exc.strerror or exc}",
                                     param_hint="--html") from None
        click.echo(f"HTML report: {written}", err=as_json)


@click.command()
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
