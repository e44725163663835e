"""``reranker evaluate``: off-policy estimates of a learner from the logged pages."""

from __future__ import annotations

from typing import Any

import click

from reranker.commands.options import config_option
from reranker.core.config import load_config


@click.command()
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

    from reranker.core.errors import ConfigError, UnprocessableError
    from reranker.core.plugins import get_plugin_manager
    from reranker.core.times import parse_time
    from reranker.evaluation.estimators import SupportError
    from reranker.evaluation.estimators import evaluate as estimate
    from reranker.evaluation.logs import pages_from_log
    from reranker.models.arm_identity import ARM_DEFAULTS, arm_section, build_arm
    from reranker.models.arms import Arm
    from reranker.models.database_store import model_place
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
    arm = Arm(spec, factory, model_place(config.store), max_bytes=config.store.max_model_bytes)
    if version == 0:  # the initial model, never saved (as /search calls it)
        model = factory.new()
    elif version is not None:
        model = arm.load_version(version, f"--version: learner {name!r} ({arm.id})")
    else:
        model, _ = arm.models.load_latest(factory)
        model = model or factory.new()
    def target(X, k):
        at = model.learner.position_marginals(X, k) \
            if model.learner.capabilities.exact_probabilities else None
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
